"""Checks at lowering that a quantized model went through the whole PT2E flow
(prepare_pt2e -> calibration -> convert_pt2e): a step left out gives no error in torchao, only a
model that runs with meaningless encodings."""

from __future__ import annotations

import logging
import math
from typing import List

import torch
from torch.export import ExportedProgram

from backends.qualcomm.builders.quant_encoding import is_quantize
from backends.qualcomm.utils.errors import QnnLoweringError

logger = logging.getLogger(__name__)

OBSERVER_NAME = "activation_post_process_"
MAX_NAMED = 6

NOT_CONVERTED_MESSAGE = (
    "the model is prepared for quantization but not converted: it still holds the observers of "
    "prepare_pt2e ({names}). Run calibration samples through it, then call "
    "`converted = convert_pt2e(prepared)` and lower `converted`."
)

UNCALIBRATED_MESSAGE = (
    "{count} quantize node(s) carry the encoding of an observer that never saw data (scale 1.0, "
    "zero point {zero_points}: torchao's default when calibrate was skipped): {names}. Run calibration "
    "samples through the prepared model (`prepared(*sample)`) between prepare_pt2e and convert_pt2e."
)


def _listed(names: List[str]) -> str:
    return ", ".join(names[:MAX_NAMED]) + (f", ... ({len(names)} in all)" if len(names) > MAX_NAMED else "")


def observer_names(program: ExportedProgram) -> List[str]:
    """The observers (or fake quantizers) of prepare_pt2e an exported program still holds."""
    found = {fqn.split(".")[0] for fqn in program.graph_signature.buffers if OBSERVER_NAME in fqn}
    return sorted(found, key=lambda name: (len(name), name))


def check_converted_program(program: ExportedProgram) -> None:
    """QnnLoweringError when `program` was exported from a prepared, unconverted model."""
    names = observer_names(program)
    if names:
        raise QnnLoweringError(NOT_CONVERTED_MESSAGE.format(names=_listed(names)))


def check_converted_module(module: torch.nn.Module) -> None:
    """QnnLoweringError when `module` is a prepared, unconverted model."""
    names = [name for name, _ in module.named_modules() if OBSERVER_NAME in name]
    if names:
        raise QnnLoweringError(NOT_CONVERTED_MESSAGE.format(names=_listed(names)))


def _activation_encoding(node: torch.fx.Node):
    """(scale, zero point, quant_max) of a per-tensor activation quantize (unsigned), else None."""
    args = list(node.args) + [None] * 6
    scale, zero_point, quant_min, quant_max = args[1:5]
    if not isinstance(scale, float) or not isinstance(zero_point, int) or quant_min != 0:
        return None
    return scale, zero_point, quant_max


def _is_default_encoding(encoding) -> bool:
    """torchao's encoding before calibration: scale 1.0, zero point 0 (or the midpoint)."""
    scale, zero_point, quant_max = encoding
    midpoint = (int(quant_max) + 1) // 2 if isinstance(quant_max, int) else None
    return scale == 1.0 and zero_point in (0, midpoint)


NON_FINITE_MESSAGE = (
    "{count} quantize node(s) have a non-finite scale ({names}): the tensor they quantize held "
    "inf / nan during calibration (e.g. a -inf fill that is not a softmax's mask, which the "
    "quantizer rewrites; see docs/quantization.md). A quantized tensor cannot hold it: keep that "
    "op in float (QnnQuantizer.add_discard_nodes) or fill with a finite value."
)


def check_finite_encodings(graph: torch.fx.Graph) -> None:
    """QnnLoweringError naming the quantize nodes whose scale is inf / nan: their program would
    lower, then fail to load (the delegate refuses the encoding: error 0x23)."""
    bad = []
    for node in graph.nodes:
        if not is_quantize(node) or len(node.args) < 2:
            continue
        scale = node.args[1]
        if isinstance(scale, float) and not math.isfinite(scale):
            bad.append(node.name)
    if bad:
        raise QnnLoweringError(NON_FINITE_MESSAGE.format(count=len(bad), names=_listed(bad)))


def check_calibrated(graph: torch.fx.Graph) -> None:
    """Activation quantize nodes with torchao's default encoding (scale 1.0, zero point 0): every
    one of them -> QnnLoweringError (the model was never calibrated: its outputs would be zeros);
    some -> a warning naming them (a branch calibration never reached, or data that really spans
    [0, 255])."""
    quantizes = (n for n in graph.nodes if is_quantize(n))
    encodings = {n: e for n in quantizes if (e := _activation_encoding(n)) is not None}
    defaults = {n.name: e for n, e in encodings.items() if _is_default_encoding(e)}
    if not defaults:
        return
    zero_points = "0" if all(e[1] == 0 for e in defaults.values()) else "0 or the midpoint"
    message = UNCALIBRATED_MESSAGE.format(count=len(defaults), zero_points=zero_points, names=_listed(list(defaults)))
    if len(defaults) == len(encodings):
        raise QnnLoweringError(f"the model was quantized without calibration: {message}")
    logger.warning(
        "QnnPartitioner: %s (A tensor whose calibration data really spans [0, 255] has that "
        "encoding too: then nothing is wrong.)",
        message,
    )
