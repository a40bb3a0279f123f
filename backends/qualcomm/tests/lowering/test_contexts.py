"""Contexts of a program, sharding and `use_multi_contexts`.

Context counts: without weight sharing every partition is its own context; with
`use_weight_sharing` the partitions of a program share one; with `shard_layers` (the partitioner
cuts the delegates at layer boundaries) plus `use_multi_contexts` and `use_weight_sharing`, shard k
of every method shares context k. A generic model: SharedMlp (helpers/runtime.py, a `layers`
ModuleList of linears) with a prefill-like [4, 64] and a decode-like [1, 64] method."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from backends.qualcomm.partitioner.sharding import ShardingError
from backends.qualcomm.tests.helpers import runtime as h
from backends.qualcomm.utils import pte_tools
from backends.qualcomm.utils.context_sizes import context_sizes
from backends.qualcomm.utils.lowering import to_edge_transform_and_lower_to_qnn

SKIP_SIGMOID = {"aten.sigmoid.default"}  # SplitNet: the sigmoid on the CPU splits it in two
ATOL = 1e-2


def _contexts_while_loaded(pte, model, x) -> int:
    """Live contexts added by loading `pte` (outputs checked against eager on the way)."""
    base = h.native().live_context_count()
    program, method = h.load_method(pte)
    loaded = h.native().live_context_count() - base
    torch.testing.assert_close(h.run(method, [x])[0], model(x), atol=ATOL, rtol=ATOL)
    h.release(program, method)
    del program, method
    h.release()
    assert h.native().live_context_count() == base
    return loaded


def test_use_multi_contexts_without_shards_keeps_one_shared_context(tmp_path):
    """use_multi_contexts is accepted; with nothing sharded all partitions are shard 0: one context."""
    torch.manual_seed(3)
    model, x = h.SplitNet().eval(), torch.randn(1, 3, 12, 12)
    specs = h.fp16_specs(use_weight_sharing=True, use_multi_contexts=True)
    pte = h.lower_to_pte(model, (x,), tmp_path / "split.pte", specs, skip_node_op_set=SKIP_SIGMOID)
    assert _contexts_while_loaded(pte, model, x) == 1


DEPTH = 4


def _sharded_methods(tmp_path, shard_layers, multi_contexts=True):
    """(edge manager, .pte, modules, inputs) of SharedMlp's two methods, weight-shared."""
    modules, inputs = h.shared_mlp_methods(depth=DEPTH)
    specs = h.fp16_specs(use_weight_sharing=True, use_multi_contexts=multi_contexts)
    edge = to_edge_transform_and_lower_to_qnn(modules, inputs, specs, shard_layers=shard_layers)
    pte = tmp_path / f"mlp_{len(shard_layers or [])}.pte"
    edge.to_executorch().write_to_file(open(pte, "wb"))
    return edge, pte, modules, inputs


def _qnn_modules(edge):
    from executorch.exir.lowered_backend_module import get_lowered_submodules

    return [
        lowered
        for method in edge.methods
        for _, lowered, _ in get_lowered_submodules(edge.exported_program(method).graph_module)
    ]


def _outputs(pte, inputs):
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(str(pte))
    methods = {name: program.load_method(name) for name in inputs}
    loaded = h.native().live_context_count()
    outputs = {name: h.run(method, inputs[name])[0] for name, method in methods.items()}
    del program, methods
    h.release()
    return outputs, loaded


@pytest.mark.parametrize("shard_layers, contexts", [([2], 2), ([1, 3], 3)])
def test_sharded_methods_get_one_context_per_shard(tmp_path, shard_layers, contexts):
    """shard_layers=[2]: layers 0-1 and 2-3; each context holds that shard of both methods; the
    outputs are bit-identical to the unsharded program's (host engine)."""
    base = h.native().live_context_count()
    _, whole, _, inputs = _sharded_methods(tmp_path, None)
    edge, sharded, modules, _ = _sharded_methods(tmp_path, shard_layers)
    rows = context_sizes(edge)
    assert len(rows) == contexts
    assert set(rows[0].graphs) == {"prefill:prefill", "decode:decode"}
    for k, row in enumerate(rows[1:], start=1):
        assert set(row.graphs) == {f"prefill:prefill_shard{k}", f"decode:decode_shard{k}"}
    stored = sharded.read_bytes()
    blobs = {bytes(lowered.processed_bytes) for lowered in _qnn_modules(edge)}
    assert len(blobs) == contexts and all(stored.count(blob) == 1 for blob in blobs)  # each stored once
    expected, _ = _outputs(whole, inputs)
    got, loaded = _outputs(sharded, inputs)
    assert loaded - base == contexts
    for name in inputs:
        assert torch.equal(got[name], expected[name])
        torch.testing.assert_close(got[name], modules[name](*inputs[name]), atol=ATOL, rtol=ATOL)


def test_shards_without_multi_contexts_share_one_context(tmp_path):
    """Sharded but use_multi_contexts=False: 2 delegates per method, all graphs in one context."""
    edge, pte, _, inputs = _sharded_methods(tmp_path, [2], multi_contexts=False)
    rows = context_sizes(edge)
    assert len(rows) == 1 and len(rows[0].graphs) == 4
    base = h.native().live_context_count()
    _, loaded = _outputs(pte, inputs)
    assert loaded - base == 1


def test_runner_runs_a_sharded_program(tmp_path):
    """qnn_executor_runner on the 2-shard program: each method's output equals the Python runtime's
    on the unsharded program, bit for bit."""
    _, whole, _, inputs = _sharded_methods(tmp_path, None)
    _, sharded, _, _ = _sharded_methods(tmp_path, [2])
    expected, _ = _outputs(whole, inputs)
    for index, name in enumerate(h.pte_method_names(sharded)):
        input_list = pte_tools.write_input_files([list(inputs[name])], tmp_path / f"in_{name}")
        out_dir = tmp_path / f"out_{name}"
        result = h.run_runner(sharded, input_list, out_dir, ["--method_index", str(index)])
        assert result.returncode == 0, result.stderr[-2000:]
        got = np.fromfile(out_dir / "output_0_0.raw", dtype=np.float32)
        assert np.array_equal(got, expected[name].numpy().ravel())


@pytest.mark.parametrize(
    "model_kind, shard_layers, message",
    [
        ("split", [1], r"no node of the graph is in a layer matching .*: this graph has no split points"),
        ("mlp", [7], r"boundary layer\(s\) \[7\] not found; the graph's layers matching .* are 0\.\.3"),
        ("mlp", ["2"], r"shard_layers must be a list of layer numbers"),
    ],
)
def test_bad_split_points_are_refused(model_kind, shard_layers, message):
    if model_kind == "split":
        model, inputs = h.SplitNet().eval(), (torch.randn(1, 3, 12, 12),)
    else:
        modules, method_inputs = h.shared_mlp_methods(depth=DEPTH)
        model, inputs = modules["decode"], method_inputs["decode"]
    with pytest.raises(ShardingError, match=message):
        to_edge_transform_and_lower_to_qnn(model, inputs, h.fp16_specs(), shard_layers=shard_layers)


@pytest.mark.parametrize("weight_sharing, contexts", [(False, 2), (True, 1)])
def test_context_count_of_two_partitions(tmp_path, weight_sharing, contexts):
    torch.manual_seed(3)
    model, x = h.SplitNet().eval(), torch.randn(1, 3, 12, 12)
    pte = h.lower_to_pte(
        model,
        (x,),
        tmp_path / "split.pte",
        h.fp16_specs(use_weight_sharing=weight_sharing),
        skip_node_op_set=SKIP_SIGMOID,
    )
    assert _contexts_while_loaded(pte, model, x) == contexts
