"""QnnQuantizer's transform for annotation: a batch norm with batch statistics (training=True
without running statistics: `F.batch_norm(x, None, None, training=True)`, `BatchNorm2d(...,
track_running_stats=False)`) as `_native_batch_norm_legit.no_stats(...)[0]`.

torchao's train / eval rewrite of a converted model (`allow_exported_model_train_eval`, then
`.eval()`) turns every `aten.batch_norm(training=True)` into an eval batch norm on its running
statistics, which fails to export when it has none. `_native_batch_norm_legit.no_stats` is the
op `aten.batch_norm` decomposes to anyway at to_edge (InstanceNormBuilder lowers it), the rewrite
does not match it, and its annotation (annotators.py, layer-norm family) quantizes its gamma /
beta like an instance norm's."""

from __future__ import annotations

import operator

import torch
from torch.fx import GraphModule, Node

_BATCH_NORM = torch.ops.aten.batch_norm.default
BATCH_STATS_NORM = torch.ops.aten._native_batch_norm_legit.no_stats


def _uses_batch_stats(node: Node) -> bool:
    """batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps, cudnn):
    training with neither running statistic."""
    args = list(node.args) + [None] * (9 - len(node.args))
    return node.target == _BATCH_NORM and bool(args[5]) and args[3] is None and args[4] is None


def rewrite_batch_stats_norms(model: GraphModule) -> GraphModule:
    """Each batch-statistics batch_norm -> getitem(_native_batch_norm_legit.no_stats(x, weight,
    bias, True, momentum, eps), 0), same output value."""
    changed = False
    for node in list(model.graph.nodes):
        if node.op != "call_function" or not _uses_batch_stats(node):
            continue
        args = list(node.args) + [None] * (9 - len(node.args))
        x, weight, bias, momentum, eps = args[0], args[1], args[2], args[6], args[7]
        with model.graph.inserting_before(node):
            norm = model.graph.call_function(
                BATCH_STATS_NORM,
                (x, weight, bias, True, 0.1 if momentum is None else momentum, 1e-5 if eps is None else eps),
            )
            out = model.graph.call_function(operator.getitem, (norm, 0))
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            channels = val.shape[1]
            stats = val.new_empty([channels])
            norm.meta["val"] = (val, stats, stats)
            out.meta["val"] = val
        for key in ("stack_trace", "nn_module_stack", "source_fn_stack"):
            if key in node.meta:
                norm.meta[key] = out.meta[key] = node.meta[key]
        node.replace_all_uses_with(out)
        model.graph.erase_node(node)
        changed = True
    if changed:
        model.graph.lint()
        model.recompile()
    return model
