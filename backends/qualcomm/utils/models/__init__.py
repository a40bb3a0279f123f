"""Real models (loaders, weights, sample inputs) shared by the examples, tests and benchmarks."""
