"""The product as a user gets it: run from outside the source tree against an installed
qnn-delegate wheel. Quantizes a tiny model with QnnQuantizer (8a8w), lowers it with
to_edge_transform_and_lower + QnnPartitioner, runs it with executorch.runtime and compares it
with eager PyTorch; also checks that the wheel holds no test code. Then runs README.md's
runnable snippet as written (its path is the first argument), in the current folder."""

from __future__ import annotations

import importlib.util
import pathlib
import re
import subprocess
import sys

import torch
from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower
from executorch.runtime import Runtime
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

import backends.qualcomm as qnn
from backends.qualcomm import (
    QcomChipset,
    QnnPartitioner,
    QnnQuantizer,
    QuantDtype,
    generate_htp_compiler_spec,
    generate_qnn_executorch_compiler_spec,
)


def main() -> int:
    package = pathlib.Path(qnn.__file__).parent
    assert "site-packages" in str(package), f"imported from {package}, not from the installed wheel"
    assert importlib.util.find_spec("backends.qualcomm.tests") is None, "the wheel ships the tests"
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 1)).eval()
    x = torch.randn(1, 3, 16, 16)
    quantizer = QnnQuantizer()
    quantizer.set_default_quant_config(QuantDtype.use_8a8w, is_conv_per_channel=True)
    prepared = prepare_pt2e(torch.export.export(model, (x,), strict=False).module(), quantizer)
    with torch.no_grad():
        prepared(x)
    converted = convert_pt2e(prepared)
    specs = generate_qnn_executorch_compiler_spec(QcomChipset.SM8650, generate_htp_compiler_spec(use_fp16=False))
    edge = to_edge_transform_and_lower(
        torch.export.export(converted, (x,), strict=False),
        partitioner=[QnnPartitioner(specs)],
        compile_config=EdgeCompileConfig(_check_ir_validity=False),
    )
    program = Runtime.get().load_program(edge.to_executorch().buffer)
    got = program.load_method("forward").execute([x])[0]
    with torch.no_grad():
        want = model(x)
    err = float((got - want).abs().max() / (want.max() - want.min()))
    print(f"qnn-delegate wheel: {package}; max |delegated - eager| = {err:.4f} of the output range")
    assert err < 0.05, err
    return 0


README_SNIPPET = re.compile(r"<!-- runnable: readme -->\n```python\n(.*?)^```", re.S | re.M)


def run_readme_snippet(readme: pathlib.Path) -> int:
    """README's snippet, as written, by this interpreter: it must exit 0 and print its figure."""
    snippet = README_SNIPPET.search(readme.read_text()).group(1)
    pathlib.Path("readme_snippet.py").write_text(snippet)
    done = subprocess.run([sys.executable, "readme_snippet.py"], capture_output=True, text=True)
    print(done.stdout, end="")
    if done.returncode != 0 or "max |delegate - QDQ model|:" not in done.stdout:
        print(done.stderr[-4000:], file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main() or (run_readme_snippet(pathlib.Path(sys.argv[1])) if len(sys.argv) > 1 else 0))
