"""Helpers of the example scripts: step logging, plus the program helpers they share with
the tests and benchmarks (backends.qualcomm.utils.pte_tools, re-exported here)."""

from __future__ import annotations

import time

from backends.qualcomm.utils.pte_tools import *  # noqa: F401,F403
from backends.qualcomm.utils.pte_tools import PteToolError

ExampleError = PteToolError  # a step of an example failed; the message says which and why


def log_step(message: str) -> float:
    """Print a step line and return the start time."""
    print(f"[qnn] {message}", flush=True)
    return time.perf_counter()
