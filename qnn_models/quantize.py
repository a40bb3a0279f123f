"""PT2E quantization of a model with QnnQuantizer and the compile specs of a quantized delegate,
as the examples, benchmarks and tests do it."""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

import torch
from torchao.quantization.pt2e import allow_exported_model_train_eval
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e, prepare_qat_pt2e

from backends.qualcomm import (
    QcomChipset,
    QnnQuantizer,
    QuantDtype,
    generate_htp_compiler_spec,
    generate_qnn_executorch_compiler_spec,
)


def quant_compile_specs(
    quant_dtype: QuantDtype = QuantDtype.use_8a8w, soc_model: QcomChipset = QcomChipset.SM8650, **kwargs
) -> list:
    """Quantized HTP precision; fp16 for weight-only fp16a8w."""
    return generate_qnn_executorch_compiler_spec(
        soc_model, generate_htp_compiler_spec(use_fp16=quant_dtype == QuantDtype.use_fp16a8w), **kwargs
    )


def quantize_module(
    module: torch.nn.Module,
    inputs: Tuple,
    quantizer: QnnQuantizer,
    calibration: Optional[Sequence[Tuple]] = None,
    is_qat: bool = False,
) -> torch.fx.GraphModule:
    """export -> prepare_pt2e (or prepare_qat_pt2e) -> run calibration samples -> convert_pt2e."""
    exported = torch.export.export(module.eval() if not is_qat else module, tuple(inputs), strict=False).module()
    prepared = prepare_qat_pt2e(exported, quantizer) if is_qat else prepare_pt2e(exported, quantizer)
    with torch.no_grad():
        for sample in calibration or [inputs]:
            prepared(*sample)
    converted = convert_pt2e(prepared)
    allow_exported_model_train_eval(converted)
    return converted
