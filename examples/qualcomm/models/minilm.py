"""Kept for test_quant_boundaries.py, which still imports it here: the model lives in
backends.qualcomm.utils.models.minilm."""
from backends.qualcomm.utils.models.minilm import *  # noqa: F401,F403
from backends.qualcomm.utils.models.minilm import load_minilm, sentence_embeddings, tokenize  # noqa: F401
