"""Annotators per quantization family: which inputs are observed and how the output is.
Which ops belong to which family is declared by the builders (NodeBuilder.quant_annotations).

Families:
- weighted (conv1d/2d/3d, transposed convs, linear): activation in, weight (per tensor /
  channel / block), derived int32 bias, activation out.
- compute (elementwise, activations, softmax, norms, reductions, avg pools, matmul):
  every tensor input and the output get activation specs.
- shared (reshape-like, max pool, cat, slice, embedding, split): the first input is observed,
  the other inputs and the output (each getitem of a tensor-list output) share its parameters.
- embedding with is_embedding_per_channel: per-row weight encoding, own output encoding."""

from __future__ import annotations

import operator
from typing import Callable, Dict, List, Optional, Tuple

import torch
from torch.fx import Node
from torchao.quantization.pt2e.quantizer import (
    FixedQParamsQuantizationSpec,
    QuantizationAnnotation,
    SharedQuantizationSpec,
)

import backends.qualcomm.builders  # noqa: F401  (registers the builders and their quant families)
from backends.qualcomm.builders.registry import QuantFamily, aten_ops, quant_annotated_ops, quant_family
from backends.qualcomm.quantizer.block_sizes import transposed_conv_groups
from backends.qualcomm.quantizer.qconfig import QuantConfig, bias_spec, symmetric_16bit_activation

Q_ANNOTATION_KEY = "quantization_annotation"


# Ops with a rule of their own inside a family (which ops each family annotates, and which
# builder lowers them, is the builders' quant_annotations: registry.quant_family).
CONV_OPS = aten_ops(
    "conv1d.default",
    "conv1d.padding",
    "conv2d.default",
    "conv2d.padding",
    "conv3d.default",
    "conv3d.padding",
    "convolution.default",
)
# Weight [Cin, Cout/group, k..]: per-channel encodings run along axis 1, LPBQ blocks along axis 0.
TRANSPOSED_CONV_OPS = aten_ops("conv_transpose1d.default", "conv_transpose2d.input", "conv_transpose3d.input")
LINEAR_OPS = aten_ops("linear.default")
BATCH_NORM_OPS = aten_ops("batch_norm.default", "_native_batch_norm_legit_no_training.default")
# 16-bit: the second operand of a matmul is symmetric (HTP's MatMul refuses another offset).
MATMUL_OPS = aten_ops("matmul.default", "bmm.default", "mm.default")
# Inputs of compute ops that are not activations (weights of norms stay float).
_FLOAT_ARG_POSITIONS: Dict[object, tuple] = {op: (1, 2, 3, 4) for op in BATCH_NORM_OPS}


def feeds_batch_norm(node: Node) -> bool:
    """conv -> batch_norm (QAT graphs): the pair is quantized as one op so that it folds."""
    return len(node.users) == 1 and next(iter(node.users)).target in BATCH_NORM_OPS


def _after_conv(node: Node) -> bool:
    return (
        node.target in BATCH_NORM_OPS
        and isinstance(node.args[0], Node)
        and node.args[0].target in CONV_OPS + TRANSPOSED_CONV_OPS
        and feeds_batch_norm(node.args[0])
    )


def is_transposed_conv(node: Node) -> bool:
    """conv_transpose1d/2d/3d, or aten.convolution with transposed=True."""
    if node.target in TRANSPOSED_CONV_OPS:
        return True
    return node.target == torch.ops.aten.convolution.default and len(node.args) > 6 and bool(node.args[6])


def _transposed_weight_spec(node: Node, config: QuantConfig, per_channel: bool):
    """(spec, per channel) of a transposed conv's weight [Cin, Cout/group, k..]: per output
    channel (axis 1) with one group; per tensor when grouped (axis 1 holds Cout/group channels,
    which cannot give the Cout bias scales)."""
    if not per_channel or transposed_conv_groups(node) != 1 or config.weight_per_channel_axis1 is None:
        return config.weight, False
    return config.weight_per_channel_axis1, True


def is_annotated(node: Node) -> bool:
    annotation = node.meta.get(Q_ANNOTATION_KEY)
    return annotation is not None and annotation._annotated


def _tensor_args(node: Node, skip: tuple = ()) -> List[Node]:
    args = []
    for i, arg in enumerate(node.args):
        if i in skip:
            continue
        for a in arg if isinstance(arg, (list, tuple)) else [arg]:
            if (
                isinstance(a, Node)
                and isinstance(a.meta.get("val"), torch.Tensor)
                and a.meta["val"].is_floating_point()
            ):
                args.append(a)
    return args


def _float_output(node: Node) -> bool:
    val = node.meta.get("val")
    return isinstance(val, torch.Tensor) and val.is_floating_point()


def _set(node: Node, inputs: Dict[Node, object], output: Optional[object]) -> None:
    if not _float_output(node):
        return
    node.meta[Q_ANNOTATION_KEY] = QuantizationAnnotation(input_qspec_map=inputs, output_qspec=output, _annotated=True)


def _weight_spec(node: Node, config: QuantConfig, per_channel: bool, block_size: Optional[Tuple[int, ...]]):
    if config.weight_block is not None and block_size:
        return config.weight_block(tuple(block_size)), True
    if per_channel:
        return config.weight_per_channel, False
    return config.weight, False


def annotate_weighted(node: Node, config: QuantConfig, block_size: Optional[Tuple[int, ...]] = None) -> None:
    """conv / transposed conv / linear: input, weight (LPBQ with the torch block size
    (1, b, *kernel); transposed: (b, 1, *kernel)), bias (derived, own-range), output."""
    x, weight = node.args[0], node.args[1]
    bias = node.args[2] if len(node.args) > 2 else None
    if is_transposed_conv(node) and not block_size:
        w_spec, per_channel = _transposed_weight_spec(node, config, config.is_conv_per_channel)
    else:
        per_channel = config.is_conv_per_channel if node.target in CONV_OPS else config.is_linear_per_channel
        w_spec, is_block = _weight_spec(node, config, per_channel, block_size)
        per_channel = per_channel or is_block
    # Order input, weight, bias: torchao's QAT conv-bn rewrite remaps the keys by position.
    inputs: Dict[Node, object] = {}
    if config.input_activation is not None:
        inputs[x] = config.input_activation
    inputs[weight] = w_spec
    if config.input_activation is not None and isinstance(bias, Node):
        # LPBQ: int32 with scale input x float channel scale (qconfig._bias_weight_scale)
        inputs[bias] = config.bias or bias_spec((x, node), (weight, node), per_channel)
    output = None if feeds_batch_norm(node) else config.output_activation
    _set(node, inputs, output)


def annotate_compute(node: Node, config: QuantConfig) -> None:
    if config.input_activation is None:
        return
    skip = _FLOAT_ARG_POSITIONS.get(node.target, ())
    if _after_conv(node):
        skip = skip + (0,)
    inputs = {a: config.input_activation for a in _tensor_args(node, skip)}
    if (
        node.target in MATMUL_OPS
        and _is_16bit(config.input_activation)
        and len(node.args) > 1
        and node.args[1] in inputs
        and node.args[1] is not node.args[0]
    ):
        inputs[node.args[1]] = symmetric_16bit_activation(config.input_activation)
    if _bool_output(node) or _integer_output(node):
        _set_inputs_only(node, inputs)
        return
    _set(node, inputs, fixed_output_spec(node, config) or config.output_activation)


def _is_16bit(spec) -> bool:
    return spec is not None and spec.quant_max is not None and spec.quant_max > 255


def _bool_output(node: Node) -> bool:
    val = node.meta.get("val")
    return isinstance(val, torch.Tensor) and val.dtype == torch.bool


def _integer_output(node: Node) -> bool:
    """argmax / argmin: an index output."""
    val = node.meta.get("val")
    return isinstance(val, torch.Tensor) and not val.is_floating_point() and not val.is_complex()


def _set_inputs_only(node: Node, inputs: Dict[Node, object]) -> None:
    """A comparison / argmax: its float inputs are quantized, its bool / index output is not (the
    delegate compares the dequantized values, as the QDQ reference does)."""
    if inputs:
        node.meta[Q_ANNOTATION_KEY] = QuantizationAnnotation(input_qspec_map=inputs, output_qspec=None, _annotated=True)


TANH_OPS = aten_ops("tanh.default")


def fixed_output_spec(node: Node, config: QuantConfig) -> Optional[FixedQParamsQuantizationSpec]:
    """16-bit tanh: the fixed symmetric [-1, 1] output encoding (scale 2 / 65536, zero point
    32768) that QNN's HTP Tanh requires (validation: 'expected equal to -32768'; the observed
    range gives another offset and the node would stay on the CPU)."""
    act = config.output_activation
    if node.target not in TANH_OPS or act is None or act.quant_max is None or act.quant_max <= 255:
        return None
    return FixedQParamsQuantizationSpec(
        dtype=act.dtype,
        scale=2.0 / 65536,
        zero_point=32768,
        quant_min=0,
        quant_max=65535,
        qscheme=torch.per_tensor_affine,
    )


# Positions of gamma and beta in the norms' args: layer_norm(x, shape, gamma, beta),
# group_norm(x, groups, gamma, beta), rms_norm(x, shape, gamma, eps); instance_norm(x, gamma, beta, ..).
_NORM_AFFINE_ARGS = {op: (1, 2) for op in aten_ops("instance_norm.default", "_native_batch_norm_legit.no_stats")}


# Norms whose QNN op is InstanceNorm: with 16-bit activations QNN 2.51's HTP refuses a 16-bit or
# a signed gamma (validation 3110 'Unsupported input/output datatypes': UFIXED_POINT_16 input with
# SFIXED_POINT_16 or SFIXED_POINT_8 gamma) and takes a uint8 one (qconfig instance_norm_weight).
INSTANCE_NORM_OPS = aten_ops("instance_norm.default", "_native_batch_norm_legit.no_stats")


def _norm_gamma_spec(node: Node, config: QuantConfig):
    """gamma's spec: the layer-norm gamma of the dtype; InstanceNorm's with 16-bit activations."""
    if node.target in INSTANCE_NORM_OPS and config.instance_norm_weight is not None:
        return config.instance_norm_weight
    return config.norm_weight or config.input_activation


def annotate_layer_norm(node: Node, config: QuantConfig) -> None:
    """Norms with gamma / beta (layer_norm, group_norm, instance_norm, rms_norm): activation in
    and out, gamma and beta quantized (QNN's HTP norms refuse float gamma / beta in a quantized
    graph)."""
    if config.input_activation is None:
        return
    x = node.args[0]
    g_at, b_at = _NORM_AFFINE_ARGS.get(node.target, (2, 3))
    gamma = node.args[g_at] if len(node.args) > g_at else None
    beta = node.args[b_at] if len(node.args) > b_at else None
    inputs: Dict[Node, object] = {x: config.input_activation}
    if isinstance(gamma, Node) and _float_output(gamma):
        inputs[gamma] = _norm_gamma_spec(node, config)
    if isinstance(beta, Node) and _float_output(beta) and config.norm_bias is not None:
        inputs[beta] = config.norm_bias
    if _tensor_list_output(node):  # (output, mean, rstd) of a batch-statistics norm: output 0 only
        node.meta[Q_ANNOTATION_KEY] = QuantizationAnnotation(input_qspec_map=inputs, _annotated=True)
        for user in node.users:
            if user.target is operator.getitem and user.args[1] == 0:
                user.meta[Q_ANNOTATION_KEY] = QuantizationAnnotation(
                    output_qspec=config.output_activation, _annotated=True
                )
        return
    _set(node, inputs, config.output_activation)


def annotate_embedding(node: Node, config: QuantConfig) -> None:
    """aten.embedding(weight, indices): the table shares the output's encoding, or with
    is_embedding_per_channel gets a per-row (axis 0) weight encoding and the output its own
    activation encoding (a Gather over an AXIS_SCALE_OFFSET table)."""
    if not config.is_embedding_per_channel:
        annotate_shared(node, config)
        return
    weight = node.args[0]
    if config.input_activation is None or not isinstance(weight, Node) or not _float_output(weight):
        return
    _set(node, {weight: config.weight_per_channel}, config.output_activation)


def annotate_shared(node: Node, config: QuantConfig) -> None:
    if config.input_activation is None:
        return
    # cat([x, x]) (every rotary embedding's cat((freqs, freqs))): one input edge per tensor, or
    # the second edge would share with itself and torchao's prepare recurses forever.
    args = list(dict.fromkeys(_tensor_args(node)))
    if not args:
        return
    first = args[0]
    shared = SharedQuantizationSpec((first, node))
    inputs = {first: config.input_activation}
    inputs.update({a: shared for a in args[1:]})
    if _tensor_list_output(node):
        _set_multi_output(node, inputs, shared)
        return
    _set(node, inputs, shared)


def _tensor_list_output(node: Node) -> bool:
    """A tuple / list of tensors, the first floating: split, chunk, unbind; (values, indices)
    of a max pool."""
    val = node.meta.get("val")
    return (
        isinstance(val, (list, tuple))
        and bool(val)
        and all(isinstance(v, torch.Tensor) for v in val)
        and val[0].is_floating_point()
    )


def _set_multi_output(node: Node, inputs: Dict[Node, object], shared: object) -> None:
    """A tensor-list op (split, chunk, unbind; a max pool's values): the inputs on the node,
    each floating getitem user's output sharing the first input's encoding."""
    node.meta[Q_ANNOTATION_KEY] = QuantizationAnnotation(input_qspec_map=inputs, _annotated=True)
    val = node.meta.get("val")
    for user in node.users:
        if user.target is operator.getitem and val[user.args[1]].is_floating_point():
            user.meta[Q_ANNOTATION_KEY] = QuantizationAnnotation(output_qspec=shared, _annotated=True)


_ANNOTATORS: Dict[QuantFamily, Callable] = {
    QuantFamily.WEIGHTED: annotate_weighted,
    QuantFamily.COMPUTE: annotate_compute,
    QuantFamily.LAYER_NORM: annotate_layer_norm,
    QuantFamily.SHARED: annotate_shared,
    QuantFamily.EMBEDDING: annotate_embedding,
}


def annotator_for(target: object) -> Optional[Callable]:
    """The annotator of the family the builder of `target` declares; None: not quantized."""
    family = quant_family(target)
    return _ANNOTATORS[family] if family is not None else None


def supported_ops() -> set:
    """Every OpOverload QnnQuantizer annotates (the builders' quant_annotations)."""
    return set(quant_annotated_ops())
