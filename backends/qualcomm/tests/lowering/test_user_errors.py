"""The PT2E flow, the API and the runner used the wrong way: a clear error naming what is wrong
and what to do, never a model that runs with meaningless results or a raw exception."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest
import torch
from executorch.exir import to_edge_transform_and_lower
from executorch.exir.backend.compile_spec_schema import CompileSpec
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

from backends.qualcomm import (
    QnnPartitioner,
    QnnQuantizer,
    QuantDtype,
    generate_htp_compiler_spec,
    to_edge_transform_and_lower_to_qnn,
)
from backends.qualcomm.tests.helpers.real_models import assert_clean_failure
from backends.qualcomm.tests.helpers.quant_tester import quant_compile_specs
from backends.qualcomm.tests.helpers.tester import randn
from backends.qualcomm.tests.helpers.runtime import lower_to_pte, native
from backends.qualcomm.utils import pte_tools
from backends.qualcomm.utils.errors import QnnLoweringError


class ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.linear = torch.nn.Linear(4 * 6 * 6, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.conv(x).relu().flatten(1))


def _prepared(calibrate: bool) -> torch.fx.GraphModule:
    quantizer = QnnQuantizer()
    quantizer.set_default_quant_config(QuantDtype.use_8a8w)
    x = randn(1, 3, 8, 8)
    prepared = prepare_pt2e(torch.export.export(ConvNet().eval(), (x,)).module(), quantizer)
    if calibrate:
        prepared(x)
    return prepared


def _plain_lowering(module: torch.nn.Module, partitioner=None):
    x = randn(1, 3, 8, 8)
    return to_edge_transform_and_lower(
        torch.export.export(module, (x,), strict=False),
        partitioner=[partitioner or QnnPartitioner(quant_compile_specs())],
    )


def test_uncalibrated_model_is_refused():
    """convert_pt2e without a calibration run: every encoding is torchao's default (scale 1.0,
    zero point 0) and the model ran with all-zero outputs, "18 of 18 nodes delegated"."""
    with pytest.raises(QnnLoweringError, match="quantized without calibration.*quantize_per_tensor"):
        _plain_lowering(convert_pt2e(_prepared(calibrate=False)))


class ScaledScalarWhere(torch.nn.Module):
    """where(x >= 0, 0.1, -inf) * 2: a -inf that reaches no softmax is not one the quantizer
    rewrites (quantizer/inf_masks.py), so its encoding gets an inf scale."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.where(x >= 0, 0.1, float("-inf")) * 2.0


def test_non_finite_encoding_is_refused():
    """A quantize node with an inf scale: the program would lower, then fail to load (0x23)."""
    quantizer = QnnQuantizer()
    quantizer.set_default_quant_config(QuantDtype.use_8a8w)
    x = randn(6, 5)
    prepared = prepare_pt2e(torch.export.export(ScaledScalarWhere(), (x,)).module(), quantizer)
    prepared(x)
    converted = convert_pt2e(prepared)
    with pytest.raises(
        QnnLoweringError,
        match=r"2 quantize node\(s\) have a non-finite scale \(quantized_decomposed_quantize_per_tensor",
    ):
        to_edge_transform_and_lower_to_qnn(converted, (x,), quant_compile_specs())


@pytest.mark.parametrize("lowering", ["plain", "one_call"])
def test_prepared_but_unconverted_model_is_refused(lowering):
    prepared = _prepared(calibrate=True)
    with pytest.raises(QnnLoweringError, match=r"not converted.*activation_post_process_0.*convert_pt2e\(prepared\)"):
        if lowering == "plain":
            _plain_lowering(prepared)
        else:
            to_edge_transform_and_lower_to_qnn(prepared, (randn(1, 3, 8, 8),), quant_compile_specs())


class ImageInput(torch.nn.Module):
    """An input already in [0, 255] (pixels as floats) next to a normalized one."""

    def forward(self, pixels: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return pixels.relu()[:, :4] * 0.01 + x * 2


def test_some_default_encodings_are_a_warning(caplog):
    """Only some encodings are torchao's default: data that really spans [0, 255] (here) or a branch
    calibration never reached. Lowering goes on and names them."""
    pixels = torch.arange(256.0).reshape(1, 256)
    x = randn(1, 4)
    quantizer = QnnQuantizer()
    quantizer.set_default_quant_config(QuantDtype.use_8a8w)
    prepared = prepare_pt2e(torch.export.export(ImageInput(), (pixels, x)).module(), quantizer)
    prepared(pixels, x)
    converted = convert_pt2e(prepared)
    with caplog.at_level(logging.WARNING, logger="backends.qualcomm"):
        to_edge_transform_and_lower(
            torch.export.export(converted, (pixels, x), strict=False),
            partitioner=[QnnPartitioner(quant_compile_specs())],
        )
    assert "never saw data (scale 1.0, zero point 0" in caplog.text and "really spans" in caplog.text, caplog.text


@pytest.mark.parametrize(
    "specs, words",
    [
        (None, "needs a list of CompileSpec, got NoneType"),
        ("htp_options", "got HTP backend options"),
        ([CompileSpec("qnn_compile_spec", b"garbage")], "does not hold QnnExecuTorchOptions"),
        ([CompileSpec("qnn_compile_spec", bytes(64))], "does not hold QnnExecuTorchOptions"),
    ],
)
def test_bad_compile_specs_are_a_value_error(specs, words):
    if specs == "htp_options":
        specs = generate_htp_compiler_spec(use_fp16=True)
    with pytest.raises(ValueError, match=words):
        QnnPartitioner(specs)


def test_bad_engine_value_is_a_value_error():
    try:
        with pytest.raises(ValueError, match=r"'qnn_runtime_engine' value 'npu' is not allowed.*\"auto\", \"qnn\""):
            native().set_runtime_option("qnn_runtime_engine", "npu")
    finally:
        native().reset_runtime_options()


# ---- runner input lists ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def small_pte(tmp_path_factory):
    path = tmp_path_factory.mktemp("small") / "add.pte"
    return lower_to_pte(AddOne(), (randn(2, 3),), path)


class AddOne(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1


def _runner(pte, input_list, tmp_path) -> pte_tools.RunnerResult:
    command = [
        str(pte_tools.find_runner()),
        "--model_path",
        str(pte),
        "--input_list_path",
        str(input_list),
        "--output_folder_path",
        str(tmp_path / "out"),
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("text", ["", "\n  \n\t\n"], ids=["empty", "blank"])
def test_runner_input_list_without_files_is_an_error(small_pte, tmp_path, text):
    """It ran once on zero-filled inputs, wrote plausible outputs and exited 0."""
    input_list = tmp_path / "input_list.txt"
    input_list.write_text(text)
    result = _runner(small_pte, input_list, tmp_path)
    assert_clean_failure(result, "names no input file")
    assert not (tmp_path / "out" / "output_0_0.raw").exists()


@pytest.mark.parametrize("where", ["list", "input"])
def test_runner_directory_is_named_as_one(small_pte, tmp_path, where):
    """A directory was reported as 'has 9223372036854775807 bytes'."""
    folder = tmp_path / "inputs"
    folder.mkdir()
    input_list = folder if where == "list" else tmp_path / "input_list.txt"
    if where == "input":
        input_list.write_text(f"{folder}\n")
    result = _runner(small_pte, input_list, tmp_path)
    assert_clean_failure(result, "is a directory, not a file")
    assert "9223372036854775807" not in result.stderr


def test_loading_qnn_prints_no_foreign_line(real_qnn):
    """libQnnHtp prints ' # LIBNATIVE: No alternate configuration ...' to stdout when loaded."""
    code = (
        "from backends.qualcomm import _qnn_delegate as q\n"
        "ok, text = q.qnn_library_status()\nassert ok, text\nprint('loaded')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout == "loaded\n" and "LIBNATIVE" not in result.stderr
