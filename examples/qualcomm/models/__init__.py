"""Real models used by the qnn-delegate examples, tests and benchmarks."""
