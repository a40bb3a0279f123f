"""Runtime options, profiling into ETDump, heap checkpoints, context lifecycle,
multiple graphs / contexts, performance modes.

TestQNNFloatingPointUtils: fp16 models.
TestQNNQuantizedUtils: the same features on a PT2E-quantized model (QnnQuantizer).
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from backends.qualcomm import get_runtime_option, set_runtime_option
from backends.qualcomm.serialization.payload_reader import describe_payload
from backends.qualcomm.tests.helpers import runtime as h
from backends.qualcomm.tests.helpers.real_models import SmallConvNet
from backends.qualcomm.utils import pte_tools
from backends.qualcomm.utils.lowering import to_edge_transform_and_lower_to_qnn

pytestmark = pytest.mark.usefixtures("fresh_runtime_options")  # conftest.py

PROFILE = "qnn_runtime_profile_level"
LOG = "qnn_runtime_log_level"
PERF = "qnn_runtime_htp_performance_mode"
HEAP = "qnn_runtime_heap_profiling_path"
ATOL = 1e-3  # fp16 small-model tolerance


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """SmallConvNet lowered twice: profile level off and detailed compiled in."""
    torch.manual_seed(0)
    model = SmallConvNet().eval()
    x = torch.randn(1, 3, 16, 16)
    folder = tmp_path_factory.mktemp("utils_small")
    edge = to_edge_transform_and_lower_to_qnn(model, (x,), h.fp16_specs())
    blob = h.delegate_blobs(edge)[0]
    off = folder / "small_off.pte"
    edge.to_executorch().write_to_file(open(off, "wb"))
    detailed = h.lower_to_pte(model, (x,), folder / "small_detailed.pte", h.fp16_specs(profile_level=2))
    return {"model": model, "x": x, "off": off, "detailed": detailed, "blob": blob, "folder": folder}


def _op_names_and_types(blob: bytes):
    graph = describe_payload(blob)[0]
    return [op.name for op in graph.ops], [op.type for op in graph.ops], graph.name


def _profiled_events(pte: Path, x: torch.Tensor, etdump: Path, runs: int = 2):
    program, method = h.load_method(pte, etdump=True)
    for _ in range(runs):
        h.run(method, [x])
    h.write_etdump(program, etdump)
    h.release(program, method)
    return h.delegate_events(etdump)


class TestQNNFloatingPointUtils:
    # ---- runtime options -------------------------------------------------
    def test_qnn_backend_runtime_option_log(self, small, capfd):
        set_runtime_option(LOG, 3)  # info
        assert get_runtime_option(LOG) == 3
        program, method = h.load_method(small["off"])
        torch.testing.assert_close(h.run(method, [small["x"]])[0], small["model"](small["x"]), atol=ATOL, rtol=ATOL)
        h.release(program, method)
        info = capfd.readouterr().err
        assert "QnnDelegate: method 'forward' runs graph 'forward'" in info
        set_runtime_option(LOG, 1)  # errors only: the info line is gone
        program, method = h.load_method(small["off"])
        h.run(method, [small["x"]])
        h.release(program, method)
        assert "runs graph" not in capfd.readouterr().err

    def test_qnn_backend_runtime_option_never_set(self):
        for key in h.RUNTIME_KEYS:
            with pytest.raises(KeyError, match="was never set"):
                get_runtime_option(key)

    def test_qnn_backend_runtime_option_errors_keep_valid_ones(self):
        with pytest.raises(KeyError, match="qnn_runtime_bogus"):
            h.native().set_runtime_options({LOG: 4, "qnn_runtime_bogus": 1, PERF: 4})
        assert get_runtime_option(LOG) == 4 and get_runtime_option(PERF) == 4
        with pytest.raises(TypeError, match=PROFILE):
            h.native().set_runtime_options({PROFILE: "detailed", HEAP: "/tmp/heap.csv"})
        assert get_runtime_option(HEAP) == "/tmp/heap.csv"
        with pytest.raises(KeyError, match="was never set"):
            get_runtime_option(PROFILE)
        with pytest.raises(TypeError, match=HEAP):
            set_runtime_option(HEAP, 5)
        with pytest.raises(KeyError, match="unknown runtime option"):
            get_runtime_option("qnn_runtime_bogus")

    # ---- profiling -------------------------------------------------------
    def test_qnn_backend_runtime_option_profile(self, small, tmp_path):
        names, types, graph = _op_names_and_types(small["blob"])
        assert _profiled_events(small["off"], small["x"], tmp_path / "off.etdp") == []
        set_runtime_option(PROFILE, 2)  # compiled off, detailed at run time
        events = _profiled_events(small["off"], small["x"], tmp_path / "on.etdp", runs=3)
        assert [e[0] for e in events] == names + [graph]
        assert all(runs == 3 for _, _, runs in events)
        assert [h.parse_metadata(m)["type"] for _, m, _ in events] == types + ["Graph"]

    def test_qnn_backend_runtime_option_profile_basic(self, small, tmp_path):
        set_runtime_option(PROFILE, 1)
        events = _profiled_events(small["detailed"], small["x"], tmp_path / "basic.etdp", runs=4)
        assert [(name, runs) for name, _, runs in events] == [("forward", 4)]

    def test_qnn_backend_profile_op(self, small, tmp_path):
        names, types, graph = _op_names_and_types(small["blob"])
        events = _profiled_events(small["detailed"], small["x"], tmp_path / "op.etdp", runs=2)
        # One event per op, in execution order, named after the op, then the graph's own event;
        # each logged once per run.
        assert [name for name, _, _ in events] == names + [graph]
        assert [runs for _, _, runs in events] == [2] * (len(names) + 1)
        meta = [h.parse_metadata(m) for _, m, _ in events]
        assert [m["type"] for m in meta] == types + ["Graph"]
        # each op event names the code path its kernel picked (Kernel::path); the graph's none
        assert all(m.get("path") for m in meta[:-1]) and "path" not in meta[-1]
        op_us, graph_us = [float(m["us"]) for m in meta[:-1]], float(meta[-1]["us"])
        op_cycles, graph_cycles = [int(m["cycles"]) for m in meta[:-1]], int(meta[-1]["cycles"])
        assert all(us >= 0.0 for us in op_us) and graph_us > 0.0
        assert all(c > 0 for c in op_cycles)
        # The ops run inside the graph's interval (first run's metadata; 1 us of rounding per op).
        assert sum(op_us) <= graph_us + 1e-3 * len(op_us)
        assert sum(op_cycles) <= graph_cycles
        set_runtime_option(PROFILE, 0)  # run-time off wins over compiled detailed
        assert _profiled_events(small["detailed"], small["x"], tmp_path / "off.etdp") == []

    # ---- heap checkpoints ------------------------------------------------
    def test_qnn_backend_runtime_option_heap_profile(self, small, tmp_path):
        assert h.native().live_context_count() == 0
        path = tmp_path / "heap.csv"
        path.write_text("stale line\n")
        set_runtime_option(HEAP, str(path))
        set_runtime_option(PROFILE, 1)
        shared = h.lower_to_pte(*h.shared_mlp_methods(), tmp_path / "mlp.pte", h.fp16_specs(use_weight_sharing=True))
        program_a, method_a = h.load_method(small["off"])
        program_b, method_b = h.load_method(shared, "decode")
        assert h.native().live_context_count() == 2
        assert h.native().engine_bytes_in_use() > 0
        h.release(program_a, method_a, program_b, method_b)
        del program_a, method_a, program_b, method_b
        h.release()
        assert h.native().live_context_count() == 0
        lines = path.read_text().splitlines()
        assert len(lines) == 2, lines
        (k0, v0), (k1, v1) = (line.split(",") for line in lines)
        assert (k0, k1) == ("before_context_created(bytes)", "after_context_freed(bytes)")
        assert int(v1) >= int(v0)
        assert int(v1) == int(v0) == h.native().engine_bytes_in_use()  # nothing leaked

    def test_qnn_backend_heap_profile_needs_profiling(self, small, tmp_path, capfd):
        path = tmp_path / "heap_off.csv"
        set_runtime_option(HEAP, str(path))  # profile level stays off: warning, no file
        program, method = h.load_method(small["off"])
        h.release(program, method)
        del program, method
        h.release()
        assert not path.exists()
        assert "needs a profile level" in capfd.readouterr().err

    # ---- performance modes -----------------------------------------------
    def test_qnn_backend_runtime_option_htp_performance(self, small):
        qd = h.native()
        all_threads = qd.thread_pool_size()
        assert [qd.threads_for_performance_mode(m) for m in (1, 2, 3)] == [all_threads] * 3
        assert [qd.threads_for_performance_mode(m) for m in (4, 5, 6)] == [1, 1, 1]
        assert qd.threads_for_performance_mode(8) == min(all_threads, max(2, all_threads // 2))
        program, method = h.load_method(small["off"])
        results = {}
        for mode in (2, 4, 8):
            set_runtime_option(PERF, mode)
            assert get_runtime_option(PERF) == mode
            results[mode] = h.run(method, [small["x"]])[0]
        del program, method
        # Threads split output tiles only: every mode gives bit-identical outputs.
        assert torch.equal(results[2], results[4]) and torch.equal(results[2], results[8])

    def test_qnn_backend_parallel_gemm_matches_serial(self, tmp_path):
        torch.manual_seed(1)
        model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 384))
        x = torch.randn(64, 256)
        edge = to_edge_transform_and_lower_to_qnn(model.eval(), (x,), h.fp16_specs())
        blob = h.delegate_blobs(edge)[0]
        serial = h.native().run_payload(blob, [x.numpy()])[0]  # one thread outside the backend
        pte = tmp_path / "mlp.pte"
        edge.to_executorch().write_to_file(open(pte, "wb"))
        program, method = h.load_method(pte)
        set_runtime_option(PERF, 2)  # burst: all threads
        parallel = h.run(method, [x])[0].numpy()
        del program, method
        np.testing.assert_array_equal(parallel, serial)
        np.testing.assert_allclose(serial, model(x).detach().numpy(), atol=2e-2, rtol=2e-2)

    # ---- lifecycle -------------------------------------------------------
    def test_qnn_backend_rebind_buffers_every_execute(self, small):
        torch.manual_seed(2)
        samples = [torch.randn(1, 3, 16, 16) for _ in range(24)]
        results = h.test_hooks().execute_many(small["blob"], [[s.numpy()] for s in samples])
        assert len({r[0].ctypes.data for r in results}) == len(samples)  # own buffers each call
        for sample, result in zip(samples, results):
            expected = small["model"](sample).detach().numpy()
            np.testing.assert_allclose(result[0], expected, atol=ATOL, rtol=ATOL)
        program, method = h.load_method(small["off"])
        for sample in samples[:8]:
            torch.testing.assert_close(h.run(method, [sample])[0], small["model"](sample), atol=ATOL, rtol=ATOL)
        h.release(program, method)

    def test_qnn_backend_shared_context_teardown(self, small):
        qd = h.native()
        base_contexts, base_handles = qd.live_context_count(), qd.live_handle_count()
        loaded = [h.load_method(small["off"]) for _ in range(3)]  # one payload, three handles
        assert qd.live_context_count() == base_contexts + 1
        assert qd.live_handle_count() == base_handles + 3
        for pair in loaded[:2]:
            h.run(pair[1], [small["x"]])
        del pair
        loaded = loaded[2:]
        h.release()
        assert qd.live_context_count() == base_contexts + 1  # the last user keeps it
        torch.testing.assert_close(
            h.run(loaded[0][1], [small["x"]])[0], small["model"](small["x"]), atol=ATOL, rtol=ATOL
        )
        loaded = []
        h.release()
        assert (qd.live_context_count(), qd.live_handle_count()) == (base_contexts, base_handles)

    def test_qnn_backend_destroy_shared_handle_twice(self, small):
        base = h.native().live_context_count()
        counts = h.test_hooks().init_destroy_twice(small["blob"])
        assert counts == (base + 1, base + 1, base)

    def test_qnn_backend_test_hooks_not_in_product_module(self):
        product, hooks = h.require_extension(), h.test_hooks()
        for name in (
            "execute_many",
            "init_destroy_twice",
            "kernel_paths",
            "live_context_count",
            "live_qnn_context_count",
            "live_handle_count",
            "engine_bytes_in_use",
            "registered_op_types",
            "duplicate_kernel_registrations",
        ):
            assert not hasattr(product, name) and callable(getattr(hooks, name))

    def test_qnn_backend_options_from_threads_while_executing(self, small):
        program, method = h.load_method(small["off"])
        expected = small["model"](small["x"])
        errors, stop = [], threading.Event()

        def toggle(key, values):
            i = 0
            while not stop.is_set():
                set_runtime_option(key, values[i % len(values)])
                if get_runtime_option(key) not in values:
                    errors.append(key)
                i += 1

        threads = [
            threading.Thread(target=toggle, args=(PERF, [2, 4, 8])),
            threading.Thread(target=toggle, args=(LOG, [1, 2])),
            threading.Thread(target=toggle, args=(PROFILE, [0, 1, 2])),
        ]
        for t in threads:
            t.start()
        try:
            for _ in range(40):
                torch.testing.assert_close(h.run(method, [small["x"]])[0], expected, atol=ATOL, rtol=ATOL)
        finally:
            stop.set()
            for t in threads:
                t.join()
        del program, method
        assert errors == []

    # ---- multiple graphs / contexts -----------------------------------------
    def test_qnn_backend_multi_graphs(self, tmp_path):
        modules, inputs = h.shared_mlp_methods()
        shared_edge = to_edge_transform_and_lower_to_qnn(modules, inputs, h.fp16_specs(use_weight_sharing=True))
        blobs = h.delegate_blobs(shared_edge, "prefill") + h.delegate_blobs(shared_edge, "decode")
        assert blobs[0] == blobs[1]  # one context for both methods
        assert sorted(g.name for g in describe_payload(blobs[0])) == ["decode", "prefill"]
        shared = tmp_path / "shared.pte"
        shared_edge.to_executorch().write_to_file(open(shared, "wb"))
        plain = h.lower_to_pte(modules, inputs, tmp_path / "plain.pte")
        weight_bytes = sum(p.numel() * 4 for p in modules["prefill"].parameters())
        assert shared.read_bytes().count(blobs[0]) == 1  # the shared blob is stored once
        assert plain.stat().st_size - shared.stat().st_size >= weight_bytes
        from executorch.runtime import Runtime

        program = Runtime.get().load_program(str(shared))
        methods = {name: program.load_method(name) for name in ("prefill", "decode")}
        assert h.native().live_context_count() == 1
        for name, method in methods.items():
            torch.testing.assert_close(
                h.run(method, inputs[name])[0], modules[name](*inputs[name]), atol=ATOL, rtol=ATOL
            )
        del program, methods, method
        h.release()
        assert h.native().live_context_count() == 0

    def test_qnn_backend_multi_graphs_runner_method_index(self, tmp_path):
        modules, inputs = h.shared_mlp_methods()
        pte = h.lower_to_pte(modules, inputs, tmp_path / "shared.pte", h.fp16_specs(use_weight_sharing=True))
        for index, name in enumerate(h.pte_method_names(pte)):
            input_list = pte_tools.write_input_files([list(inputs[name])], tmp_path / f"in_{name}")
            out_dir = tmp_path / f"out_{name}"
            result = h.run_runner(pte, input_list, out_dir, ["--method_index", str(index)])
            assert result.returncode == 0, result.stderr[-2000:]
            got = np.fromfile(out_dir / "output_0_0.raw", dtype=np.float32)
            np.testing.assert_allclose(got, modules[name](*inputs[name]).detach().numpy().ravel(), atol=ATOL, rtol=ATOL)

    def test_qnn_backend_multi_contexts(self, tmp_path):
        torch.manual_seed(3)
        model, x = h.SplitNet().eval(), torch.randn(1, 3, 12, 12)
        specs = h.fp16_specs()  # no weight sharing: every partition is its own context
        edge = to_edge_transform_and_lower_to_qnn(model, (x,), specs, skip_node_op_set={"aten.sigmoid.default"})
        blobs = h.delegate_blobs(edge)
        assert len(blobs) == 2 and blobs[0] != blobs[1]
        pte = tmp_path / "split.pte"
        edge.to_executorch().write_to_file(open(pte, "wb"))
        base = h.native().live_context_count()
        program, method = h.load_method(pte)
        assert h.native().live_context_count() == base + 2
        torch.testing.assert_close(h.run(method, [x])[0], model(x), atol=ATOL, rtol=ATOL)
        h.release(program, method)
        del program, method
        h.release()
        assert h.native().live_context_count() == base

    # ---- runner flags ----------------------------------------------------
    def test_qnn_backend_runner_runtime_flags(self, small, tmp_path):
        input_list = pte_tools.write_input_files([[small["x"]]], tmp_path / "in")
        etdump, heap = tmp_path / "run.etdp", tmp_path / "heap.csv"
        flags = [
            "--profile_level",
            "2",
            "--htp_performance_mode",
            "4",
            "--log_level",
            "1",
            "--etdump_path",
            str(etdump),
            "--heap_profiling_path",
            str(heap),
        ]
        result = h.run_runner(small["off"], input_list, tmp_path / "out", flags)
        assert result.returncode == 0, result.stderr[-2000:]
        names, _, graph = _op_names_and_types(small["blob"])
        assert [e[0] for e in h.delegate_events(etdump)] == names + [graph]
        lines = heap.read_text().splitlines()
        assert [line.split(",")[0] for line in lines] == ["before_context_created(bytes)", "after_context_freed(bytes)"]
        assert lines[0].split(",")[1] == lines[1].split(",")[1] == "0"
        bad = h.run_runner(small["off"], input_list, tmp_path / "out2", ["--profile_level", "x"])
        assert bad.returncode == 1 and "--profile_level" in bad.stderr


class TestQNNQuantizedUtils:
    @pytest.fixture(scope="class")
    def quantized(self, tmp_path_factory):
        pytest.importorskip("backends.qualcomm.quantizer")
        torch.manual_seed(4)
        model, x = SmallConvNet().eval(), torch.randn(1, 3, 16, 16)
        converted = h.quantize(model, (x,), [(torch.randn(1, 3, 16, 16),) for _ in range(4)] + [(x,)])
        edge = to_edge_transform_and_lower_to_qnn(converted, (x,), h.quantized_specs())
        pte = tmp_path_factory.mktemp("q") / "q.pte"
        edge.to_executorch().write_to_file(open(pte, "wb"))
        return {"pte": pte, "x": x, "blob": h.delegate_blobs(edge)[0]}

    def test_qnn_backend_profile_op(self, quantized, tmp_path):
        names, types, graph = _op_names_and_types(quantized["blob"])
        set_runtime_option(PROFILE, 2)
        events = _profiled_events(quantized["pte"], quantized["x"], tmp_path / "q.etdp")
        assert [e[0] for e in events] == names + [graph]
        assert [h.parse_metadata(m)["type"] for _, m, _ in events] == types + ["Graph"]

    def test_qnn_backend_runtime_option_htp_performance(self, quantized):
        program, method = h.load_method(quantized["pte"])
        outs = []
        for mode in (2, 4, 8):
            set_runtime_option(PERF, mode)
            outs.append(h.run(method, [quantized["x"]])[0])
        del program, method
        assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])

    def test_qnn_backend_multi_graphs(self, tmp_path):
        pytest.importorskip("backends.qualcomm.quantizer")
        modules, inputs = h.shared_mlp_methods()
        torch.manual_seed(5)
        converted = {
            name: h.quantize(m, inputs[name], [(torch.randn_like(inputs[name][0]),) for _ in range(4)] + [inputs[name]])
            for name, m in modules.items()
        }
        edge = to_edge_transform_and_lower_to_qnn(converted, inputs, h.quantized_specs(use_weight_sharing=True))
        blobs = h.delegate_blobs(edge, "prefill") + h.delegate_blobs(edge, "decode")
        assert blobs[0] == blobs[1]
        assert sorted(g.name for g in describe_payload(blobs[0])) == ["decode", "prefill"]
        pte = tmp_path / "q_shared.pte"
        edge.to_executorch().write_to_file(open(pte, "wb"))
        assert pte.read_bytes().count(blobs[0]) == 1
        program = __import__("executorch.runtime", fromlist=["Runtime"]).Runtime.get().load_program(str(pte))
        for name in ("prefill", "decode"):
            got = h.run(program.load_method(name), inputs[name])[0]
            want = converted[name](*inputs[name])
            assert float((got - want).abs().max()) <= 0.05 * float(want.max() - want.min()) + 1e-6
        del program
