"""qnn_executor_runner's upstream flags --input_shape_path / --output_shape_path (one line of dims
per input / output) and --shared_buffer (the host engine ignores it): outputs written at the
listed size, shapes checked against what the program plans."""

from __future__ import annotations

import numpy as np
import torch

from backends.qualcomm.tests.helpers.real_models import assert_clean_failure
from backends.qualcomm.utils import pte_tools


def _run(small_model, name: str, flags: list[str]):
    input_list = pte_tools.write_input_files(small_model.samples[:1], small_model.folder / f"in_{name}")
    out_dir = small_model.folder / f"out_{name}"
    return pte_tools.run_runner(small_model.pte_path, input_list, out_dir, extra_flags=flags), out_dir


def test_same_shapes_same_outputs_and_shared_buffer(small_model):
    shapes_in = small_model.folder / "in_shapes.txt"
    shapes_in.write_text("1, 3, 16, 16\n")
    expected = small_model.runtime_outputs[0]
    shapes_out = small_model.folder / "out_shapes.txt"
    shapes_out.write_text(", ".join(str(d) for d in expected.shape) + "\n")
    flags = ["--input_shape_path", str(shapes_in), "--output_shape_path", str(shapes_out), "--shared_buffer"]
    result, out_dir = _run(small_model, "same", flags)
    assert result.returncode == 0, result.stderr
    assert torch.equal(pte_tools.read_raw_output(out_dir, 0, 0, expected), expected)


def test_output_shape_writes_that_many_elements(small_model):
    expected = small_model.runtime_outputs[0].reshape(-1)
    assert expected.numel() == 4
    shapes_out = small_model.folder / "out_first2.txt"
    shapes_out.write_text("1, 2\n")
    result, out_dir = _run(small_model, "first2", ["--output_shape_path", str(shapes_out)])
    assert result.returncode == 0, result.stderr
    data = np.fromfile(out_dir / "output_0_0.raw", dtype=np.float32)
    assert data.size == 2 and np.array_equal(data, expected[:2].numpy())


def test_bad_shape_files_are_clean_failures(small_model):
    cases = {
        "rank": ("--input_shape_path", "1, 3, 256\n", "rank 3"),
        "bigger": ("--input_shape_path", "1, 3, 32, 32\n", "more than the 3072 bytes"),
        "count": ("--input_shape_path", "1, 3, 16, 16\n1, 3\n", "lists 2 shapes, the method has 1 inputs"),
        "text": ("--input_shape_path", "1, x, 16\n", "is not a list of dims"),
        "out_big": ("--output_shape_path", "1, 99999\n", "asks for more than"),
    }
    for name, (flag, text, words) in cases.items():
        path = small_model.folder / f"shape_{name}.txt"
        path.write_text(text)
        result, _ = _run(small_model, f"bad_{name}", [flag, str(path)])
        assert_clean_failure(result, words)
