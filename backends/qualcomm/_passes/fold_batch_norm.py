"""Fold an eval batch norm that follows a convolution into the conv's weight and bias."""

from __future__ import annotations

import operator
from typing import Optional

import torch
from executorch.backends.transforms.utils import (
    create_constant_placeholder,
    delete_constant_placeholder,
    get_param_tensor,
    is_param_node,
)
from executorch.exir.dialects._ops import ops as exir_ops
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

from backends.qualcomm.utils.constants import QCOM_CONSTANT, QCOM_QUANT_ATTRS

_CONV = exir_ops.edge.aten.convolution.default
_BATCH_NORM = exir_ops.edge.aten._native_batch_norm_legit_no_training.default


def _constant(ep: ExportedProgram, node: object) -> Optional[torch.Tensor]:
    if isinstance(node, torch.fx.Node) and is_param_node(ep, node):
        return get_param_tensor(ep, node)
    return None


def _foldable(ep: ExportedProgram, bn: torch.fx.Node) -> bool:
    conv = bn.args[0]
    if not isinstance(conv, torch.fx.Node) or conv.target != _CONV or len(conv.users) != 1:
        return False
    if conv.args[6] or QCOM_QUANT_ATTRS in conv.meta:  # transposed, or quantized (PT2E folds those)
        return False
    if any(u.target is not operator.getitem or u.args[1] != 0 for u in bn.users):
        return False
    params = [conv.args[1], bn.args[3], bn.args[4]] + [a for a in bn.args[1:3] if a is not None]
    if conv.args[2] is not None:
        params.append(conv.args[2])
    return all(_constant(ep, p) is not None for p in params)


def _folded_params(ep: ExportedProgram, conv: torch.fx.Node, bn: torch.fx.Node):
    weight = _constant(ep, conv.args[1]).detach().float()
    cout = weight.shape[0]
    bias = _constant(ep, conv.args[2]) if conv.args[2] is not None else torch.zeros(cout)
    gamma = _constant(ep, bn.args[1]) if bn.args[1] is not None else torch.ones(cout)
    beta = _constant(ep, bn.args[2]) if bn.args[2] is not None else torch.zeros(cout)
    mean, var = _constant(ep, bn.args[3]), _constant(ep, bn.args[4])
    eps = float(bn.args[6]) if len(bn.args) > 6 else 1e-5
    scale = gamma.float() / torch.sqrt(var.float() + eps)
    new_weight = weight * scale.reshape([-1] + [1] * (weight.dim() - 1))
    new_bias = (bias.float() - mean.float()) * scale + beta.float()
    return new_weight.contiguous(), new_bias.contiguous()


def _new_param(ep: ExportedProgram, graph: torch.fx.Graph, name: str, data: torch.Tensor) -> torch.fx.Node:
    first_placeholder = next(n for n in graph.nodes if n.op == "placeholder")
    with graph.inserting_before(first_placeholder):
        node = create_constant_placeholder(ep, graph, name, InputKind.PARAMETER, data)
    node.meta[QCOM_CONSTANT] = True
    return node


def _drop_if_unused(ep: ExportedProgram, node: object) -> None:
    if isinstance(node, torch.fx.Node) and node.op == "placeholder" and not node.users:
        delete_constant_placeholder(ep, node)


def _fold(ep: ExportedProgram, bn: torch.fx.Node) -> None:
    graph = ep.graph_module.graph
    conv = bn.args[0]
    weight, bias = _folded_params(ep, conv, bn)
    new_weight = _new_param(ep, graph, f"{conv.name}_folded_weight", weight)
    new_bias = _new_param(ep, graph, f"{conv.name}_folded_bias", bias)
    old = [conv.args[1], conv.args[2]] + list(bn.args[1:5])
    args = list(conv.args)
    args[1], args[2] = new_weight, new_bias
    conv.args = tuple(args)
    for getitem in list(bn.users):
        getitem.replace_all_uses_with(conv)
        graph.erase_node(getitem)
    graph.erase_node(bn)
    for node in old:
        _drop_if_unused(ep, node)


def fold_batch_norm_into_conv(ep: ExportedProgram) -> ExportedProgram:
    """Preprocess pass: conv -> batch_norm(eval) becomes one conv with folded params."""
    batch_norms = [n for n in ep.graph_module.graph.nodes if n.target == _BATCH_NORM]
    changed = False
    for bn in batch_norms:
        if _foldable(ep, bn):
            _fold(ep, bn)
            changed = True
    if changed:
        ep.graph_module.graph.eliminate_dead_code()
        ep.graph_module.recompile()
    return ep
