"""sort in quantized graphs: ties are common (equal codes), and both engines keep PyTorch's
stable order (lower index first). The reference for the indices is that stable order: PyTorch's
own CPU sort with stable=False is not stable on these shapes (it gave 29, 33, 3 for three equal
values), so the QDQ module's sort.default indices are one arbitrary valid order among several.

The builder sorts exact INT_32 keys code * n + (n - 1 - i) (ascending: (n - 1 - i) - code * n)
with TopK and gathers the codes by the indices (builders/op_sort.py). QNN 2.51's TopK puts the
higher index first among equal values: the float path it replaced gave 86-88% of the 8a8w
indices equal to the QDQ reference on QNN (values rounded to float16 too: 0.4% equal)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from backends.qualcomm import QuantDtype
from backends.qualcomm.tests.helpers.quant_tester import QuantTester
from backends.qualcomm.tests.helpers.runtime import needs_qnn, one_delegate_blob
from backends.qualcomm.utils.runtime_options import require_extension

DTYPES = [QuantDtype.use_8a8w, QuantDtype.use_16a8w]


class Sorts(torch.nn.Module):
    """Sorts of a quantized tensor (a permute: the sort reads its Dequantize; a sort of the
    graph input itself runs in float)."""

    def forward(self, x):
        x = x.permute(1, 0, 2)
        return (*torch.sort(x), *torch.sort(x, descending=True), *torch.sort(x, stable=True, dim=-1, descending=True))


def tied_input(seed: int = 0) -> torch.Tensor:
    """10 distinct values on a coarse grid (each has ~3 equal ones in its row of 40, of 120):
    the graph's Quantize maps them to codes away from rounding ties, so both engines and the
    reference see the same codes."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(-4, 6, (2, 3, 40), generator=generator).float() / 2.0


def sort_tester(dtype: QuantDtype) -> QuantTester:
    return QuantTester(Sorts(), (tied_input(),), dtype).lower()


def stable_reference(tester: QuantTester) -> list:
    """The QDQ module's outputs with the indices of PyTorch's stable sort of the sorted tensor
    (its dequantized codes keep the order of the grid values: no two values share a code)."""
    refs = tester.reference_outputs()
    y = tester.inputs[0].permute(1, 0, 2)
    for i, descending in ((1, False), (3, True), (5, True)):
        refs[i] = torch.sort(y, stable=True, descending=descending)[1].numpy()
    return refs


def outputs_on(tester: QuantTester, engine: str) -> list:
    """The .pte's outputs (program order) with its delegate on `engine`."""
    ext = require_extension()
    ext.set_runtime_option("qnn_runtime_engine", engine)
    try:
        return list(tester.run().outputs)
    finally:
        ext.set_runtime_option("qnn_runtime_engine", "auto")


@pytest.mark.parametrize("dtype", DTYPES, ids=["8a8w", "16a8w"])
def test_quantized_sort_is_stable_on_the_host_engine(dtype):
    """Indices equal to the QDQ reference's (stable=True is delegated too), values equal; the
    payload's TopK sorts INT_32 keys."""
    tester = sort_tester(dtype)
    assert tester.cpu_nodes() == [], tester.partitioner.rejected_nodes
    graph = tester.payload()
    types = {t.name: t.data_type for t in graph.tensors}
    topks = [op for op in graph.ops if op.type == "TopK"]
    assert len(topks) == 3 and all(types[op.inputs[0]] == "INT_32" for op in topks)
    tester.to_executorch().run()
    for i, (out, ref) in enumerate(zip(tester.outputs, stable_reference(tester))):
        np.testing.assert_array_equal(out, ref, err_msg=f"output {i}")


@needs_qnn
@pytest.mark.parametrize("dtype", DTYPES, ids=["8a8w", "16a8w"])
def test_quantized_sort_ties_on_qnn_equal_the_reference(real_qnn, dtype):
    """On QNN's HTP (SM8650 emulation): indices equal to the host engine's and the QDQ
    reference's; values within float32 rounding of the reference (QNN's Dequantize differs from
    (q - zp) * scale in the last bit on ~5% of the elements)."""
    tester = sort_tester(dtype)
    one_delegate_blob(tester)
    tester.to_executorch()
    qnn, host = (outputs_on(tester, engine) for engine in ("qnn", "host"))
    for i, (q, h, ref) in enumerate(zip(qnn, host, stable_reference(tester))):
        if ref.dtype == np.int64:
            np.testing.assert_array_equal(q, h, err_msg=f"output {i}: QNN vs host")
            np.testing.assert_array_equal(q, ref, err_msg=f"output {i}: QNN vs reference")
        else:
            np.testing.assert_allclose(q, ref, rtol=1e-6, atol=1e-6, err_msg=f"output {i}")
