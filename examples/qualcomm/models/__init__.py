"""The models moved to backends.qualcomm.utils.models (shared with the tests)."""
