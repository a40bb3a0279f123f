"""Real models (loaders, weights, sample inputs, ImageNet labels and photos) shared by the
examples, tests and benchmarks. Not part of the qnn-delegate product: the wheel leaves it out;
the editable install (`make install`) and scripts run from the repository import it."""
