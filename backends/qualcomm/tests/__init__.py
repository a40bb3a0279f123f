"""qnn-delegate's tests, by subject:

ops/          one op family per file: lowered, run on the host engine (and on QNN when it loads),
              against eager (fp16) or the QDQ reference (quantized)
models/       real models (weights from pip packages) and whole small models
quantizer/    QnnQuantizer: its API, configs, masks, delegate boundaries, references
upstream/     what a script written for ExecuTorch's own Qualcomm backend relies on
partitioner/  what is delegated, what stays on the CPU and why
lowering/     compile specs, contexts, weight sharing, IO dim orders, import noise
passes/       graph passes (folds and fusions)
engine/       the host engine's kernels and payload checks, on hand-built payloads
qnn/          Qualcomm's QNN library (marker `qnn`): ABI, context binaries, fidelity of the
              host engine against QNN
runtime/      the runtime backend: options, profiling, heap, lifecycle, payload integrity
runner/       qnn_executor_runner
debugger/     debug handles, the intermediate-output debugger, ExecuTorch's Inspector flow
bench/        the benches' load discipline (bench/quiet.py, bench/timing.py) on fake load figures
helpers/      shared test code (testers, references, payload builder, small models)
tools/        scripts built on the test code (fidelity reports, QNN op coverage, sanitizer cases)
native/       the test-only extension's source

Markers: `slow` (real-model tests), `qnn` (needs the QNN library; conftest.py)."""
