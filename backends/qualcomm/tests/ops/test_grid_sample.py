"""grid_sample (GridSample: bilinear / nearest, zeros / border / reflection padding (2-D),
align_corners both ways;
2-D and 3-D grids): fp16 against eager, 8a8w / 16a8w against the QDQ reference, full delegation
and the Transpose count of the channel-last graph; unsupported modes stay on the CPU with a
reason.

test_real_qnn_matches_host: one delegate of the distance chains, the PoolMax2d pairs of a 3-D
max pool, the fused RmsNorm and GridSample on the real QNN (context binary, QNN outputs vs the
host engine's of the same delegate), in each precision."""

from __future__ import annotations

from typing import Tuple

import pytest
import torch
import torch.nn.functional as F

from backends.qualcomm import QuantDtype, to_edge_transform_and_lower_to_qnn
from backends.qualcomm.tests.helpers.models_float import LlamaRmsNorm
from backends.qualcomm.tests.helpers.quant_tester import QuantTester
from backends.qualcomm.tests.helpers.runtime import QNN_LOADED, assert_qnn_matches_host, needs_qnn, one_delegate_blob
from backends.qualcomm.tests.helpers.tester import QnnTester, randn

A8W8, A16W8 = QuantDtype.use_8a8w, QuantDtype.use_16a8w
nn = torch.nn


def nearest_axis(size: int, points: Tuple[int, ...], align: bool, g: torch.Generator) -> torch.Tensor:
    """Normalized coordinates along an axis of `size` pixels whose source coordinates sit 0.25
    to 0.35 pixel off the pixel centres (so nearest never sees a tie, in fp16 either), some of
    them outside the image."""
    pixel = torch.randint(-2, size + 2, points, generator=g).float()
    src = pixel + (torch.rand(points, generator=g) * 0.1 + 0.25) * torch.where(
        torch.rand(points, generator=g) < 0.5, -1.0, 1.0
    )
    return 2 * src / (size - 1) - 1 if align else (2 * src + 1) / size - 1


def nearest_grid(n: int, oh: int, ow: int, h: int, w: int, align: bool, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.stack([nearest_axis(w, (n, oh, ow), align, g), nearest_axis(h, (n, oh, ow), align, g)], dim=-1)


def bilinear_grid(n: int, oh: int, ow: int, seed: int) -> torch.Tensor:
    return torch.rand(n, oh, ow, 2, generator=torch.Generator().manual_seed(seed)) * 2.4 - 1.2


class GridSampleFamily(nn.Module):
    """conv -> grid_sample (bilinear, zeros) -> conv, and each mode / padding / align_corners
    combination on the conv's (channel-last) output; 2-D (Conv2d 3 -> 4) or 3-D (Conv3d 2 -> 3,
    5-D grid_sample)."""

    def __init__(self, spatial: int = 2):
        super().__init__()
        torch.manual_seed(0)
        conv, cin, cout = (nn.Conv2d, 3, 4) if spatial == 2 else (nn.Conv3d, 2, 3)
        self.conv1 = conv(cin, cout, 3, padding=1)
        self.conv2 = conv(cout, cout, 1)

    def forward(self, x, grid, grid_aligned, grid_half):
        y = self.conv1(x)
        return (
            self.conv2(F.grid_sample(y, grid, "bilinear", "zeros", align_corners=False)),
            F.grid_sample(y, grid, "bilinear", "border", align_corners=True),
            F.grid_sample(y, grid_aligned, "nearest", "zeros", align_corners=True),
            F.grid_sample(y, grid_half, "nearest", "border", align_corners=False),
        )


def grid_inputs(n: int = 2, h: int = 5, w: int = 6, oh: int = 4, ow: int = 7) -> Tuple[torch.Tensor, ...]:
    return (
        randn(n, 3, h, w, seed=6),
        bilinear_grid(n, oh, ow, seed=7),
        nearest_grid(n, oh, ow, h, w, True, seed=8),
        nearest_grid(n, oh, ow, h, w, False, seed=9),
    )


# One Transpose for x and one per output: the grid is read as given, none between the convs.
GRID_TRANSPOSES = 1 + 4


def test_grid_sample_fp16_matches_eager():
    tester = QnnTester(GridSampleFamily(), grid_inputs()).run_and_compare(atol=1e-2, rtol=1e-2)
    assert tester.cpu_nodes() == [] and len(tester.delegate_blobs()) == 1
    types = tester.payload().op_types()
    assert types.get("GridSample") == 4 and types.get("Transpose") == GRID_TRANSPOSES, types


# 8-bit (max steps, min exact share): nearest sampling at a quantized grid coordinate that lies
# within float rounding of a pixel boundary may pick the neighbour pixel (torch unnormalizes in
# another order of operations), a 2-step difference there; measured 91.5% exact, 3.6% at 2 steps
# (output 3, nearest / border). 16-bit: the default PT2E bounds.
GRID_BOUNDS_8BIT = (2, 0.85)

# 3-D grid_sample: the composition runs in float between Dequantize and Quantize, in fp16 on QNN.
# Measured vs QDQ, 8a8w: QNN max 2, 49-89% exact (the chain runs in fp16), the host
# engine max 1, 92-96% exact; 16a8w: QNN max 28 steps (fp16's 2^-11 relative precision), the
# host engine max 2.
GRID3D_BOUNDS_8BIT = (2, 0.4)

GRID3D_STEPS_16 = 32


@pytest.mark.parametrize("quant_dtype", [A8W8, A16W8], ids=["8a8w", "16a8w"])
def test_grid_sample_quantized_matches_qdq_reference(quant_dtype):
    """The grid is an activation with its own encoding (the QDQ reference samples at the same
    quantized coordinates)."""
    tester = QuantTester(GridSampleFamily(), grid_inputs(), quant_dtype, per_channel=True)
    tester.lower().check_fully_delegated().to_executorch().run()
    if quant_dtype == A8W8:
        tester.compare_steps(max_step_diff=GRID_BOUNDS_8BIT[0], min_exact=GRID_BOUNDS_8BIT[1])
    else:
        tester.compare_steps()
    assert tester.payload().op_types().get("GridSample") == 4


def test_grid_sample_unsupported_modes_stay_on_cpu_with_reason():
    class Rejected(nn.Module):
        def forward(self, x, grid):
            return F.grid_sample(x, grid, "bicubic", align_corners=False)

    tester = QnnTester(Rejected(), (randn(1, 2, 4, 4, seed=1), bilinear_grid(1, 3, 3, seed=2))).lower()
    reasons = " | ".join(tester.partitioner.rejected_nodes.values())
    assert "interpolation mode 'bicubic' is not supported" in reasons, reasons
    tester.to_executorch().run().compare(atol=1e-5, rtol=1e-5)


class ReflectionGridSample(nn.Module):
    """Reflection padding, bilinear and nearest, align_corners both ways (4-D or 5-D inputs); grids
    reaching up to 2.5 image widths out, so coordinates reflect more than once."""

    def forward(self, x, grid, grid_aligned, grid_half):
        return (
            F.grid_sample(x, grid, "bilinear", "reflection", align_corners=False),
            F.grid_sample(x, grid, "bilinear", "reflection", align_corners=True),
            F.grid_sample(x, grid_aligned, "nearest", "reflection", align_corners=True),
            F.grid_sample(x, grid_half, "nearest", "reflection", align_corners=False),
        )


def reflection_inputs() -> Tuple[torch.Tensor, ...]:
    x, _, _, _ = grid_inputs(1, 5, 6, 4, 7)
    wide = torch.rand(1, 4, 7, 2, generator=torch.Generator().manual_seed(21)) * 6.0 - 3.0
    g = torch.Generator().manual_seed(22)
    aligned = torch.stack([nearest_axis(6, (1, 4, 7), True, g), nearest_axis(5, (1, 4, 7), True, g)], dim=-1)
    half = torch.stack([nearest_axis(6, (1, 4, 7), False, g), nearest_axis(5, (1, 4, 7), False, g)], dim=-1)
    return x, wide, aligned, half


# 8a8w reflection (max steps, min exact share). Against the QDQ reference: measured 94.0-100%
# exact; on 3-5% of the bilinear outputs, where the 8-bit grid (range +-3, one code = 0.07 pixel)
# lands far outside the image, both engines are the same 5-7 steps away from it. QNN against the
# host engine: 56-100% exact, max 2 (QNN's quantized bilinear weights are coarser).
REFLECTION_BOUNDS_8BIT = (7, 0.9)
REFLECTION_QNN_VS_HOST_8BIT = (2, 0.5)


@pytest.mark.parametrize("quant_dtype", [None, A8W8], ids=["fp16", "8a8w"])
def test_grid_sample_reflection_on_both_engines(qnn_binary, quant_dtype):
    """GridSample padding_mode 2 (torch's reflect_coordinates, then clamped): fp16 against eager,
    8a8w against the QDQ reference, QNN (x86 HTP emulation) against the host engine (fp16:
    measured max 9.8e-4)."""
    module, inputs = ReflectionGridSample(), reflection_inputs()
    if quant_dtype is None:
        tester = QnnTester(module, inputs).lower().check_fully_delegated().to_executorch().run()
        tester.compare(atol=1e-2, rtol=1e-2)
        steps, exact = 0, 1.0
    else:
        tester = QuantTester(module, inputs, quant_dtype).lower().check_fully_delegated().to_executorch().run()
        tester.compare_steps(max_step_diff=REFLECTION_BOUNDS_8BIT[0], min_exact=REFLECTION_BOUNDS_8BIT[1])
        steps, exact = REFLECTION_QNN_VS_HOST_8BIT
    assert tester.payload().op_types().get("GridSample") == 4
    if QNN_LOADED:
        assert_qnn_matches_host(one_delegate_blob(tester), inputs, module, 2e-3, steps, exact)


def grid3d_inputs(
    n: int = 1, d: int = 3, h: int = 4, w: int = 5, out: Tuple[int, int, int] = (2, 3, 4)
) -> Tuple[torch.Tensor, ...]:
    points = (n,) + out
    bilinear = torch.rand(points + (3,), generator=torch.Generator().manual_seed(12)) * 2.4 - 1.2
    nearest = []
    for align, seed in ((True, 13), (False, 14)):
        g = torch.Generator().manual_seed(seed)
        nearest.append(torch.stack([nearest_axis(size, points, align, g) for size in (w, h, d)], dim=-1))
    return (randn(n, 2, d, h, w, seed=15), bilinear, *nearest)


def _grid3d_tester(quant_dtype):
    module, inputs = GridSampleFamily(3), grid3d_inputs()
    tester = QnnTester(module, inputs) if quant_dtype is None else QuantTester(module, inputs, quant_dtype)
    tester.lower().check_fully_delegated().to_executorch().run()
    types = tester.payload().op_types()
    # one 2-D GridSample per grid_sample (QNN 2.51 refuses a 5-D GridSample); one Transpose for
    # x and one per output, none between the convs and the sampling
    assert types.get("GridSample") == 4 and types.get("Transpose") == GRID_TRANSPOSES, types
    return tester


def test_grid_sample_3d_fp16_matches_eager(qnn_binary):
    """fp16 on QNN (when its library loads; else the host engine) within 1e-2 of eager, and QNN
    vs the host engine. Measured on QNN: max |qnn - eager| 7.6e-4, QNN vs host 4.9e-4."""
    tester = _grid3d_tester(None).compare(atol=1e-2, rtol=1e-2)
    if QNN_LOADED:
        assert_qnn_matches_host(one_delegate_blob(tester), tester.inputs, tester.module, 5e-3, 0)


@pytest.mark.parametrize("quant_dtype", [A8W8, A16W8], ids=["8a8w", "16a8w"])
def test_grid_sample_3d_quantized_matches_qdq_reference(qnn_binary, quant_dtype):
    """In float (fp16 on QNN) between Dequantize and Quantize: 8a8w within GRID3D_BOUNDS_8BIT
    of the QDQ reference; 16a8w within GRID3D_STEPS_16 (fp16's 2^-11 relative precision is 32
    16-bit steps of a full range). QNN vs host: 8a8w 2 steps, 16a8w GRID3D_STEPS_16 (measured
    26)."""
    tester = _grid3d_tester(quant_dtype)
    if quant_dtype == A8W8:
        tester.compare_steps(max_step_diff=GRID3D_BOUNDS_8BIT[0], min_exact=GRID3D_BOUNDS_8BIT[1])
    else:
        tester.compare_steps(max_step_diff=GRID3D_STEPS_16, min_exact=0.0)
    if QNN_LOADED:
        assert_qnn_matches_host(
            one_delegate_blob(tester), tester.inputs, tester.module, 0.0, 2 if quant_dtype == A8W8 else GRID3D_STEPS_16
        )


def reflection3d_inputs() -> Tuple[torch.Tensor, ...]:
    x, _, aligned, half = grid3d_inputs()
    wide = torch.rand(1, 2, 3, 4, 3, generator=torch.Generator().manual_seed(23)) * 6.0 - 3.0
    return x, wide, aligned, half


@pytest.mark.parametrize("quant_dtype", [None, A8W8], ids=["fp16", "8a8w"])
def test_grid_sample_3d_reflection_on_both_engines(qnn_binary, quant_dtype):
    """The composition with the depth coordinate reflected (torch's reflect_coordinates, then
    clamped) and 2-D GridSamples with padding_mode 2: fp16 against eager, 8a8w against the QDQ
    reference, QNN against the host engine (the chain runs in fp16 on QNN)."""
    module, inputs = ReflectionGridSample(), reflection3d_inputs()
    if quant_dtype is None:
        tester = QnnTester(module, inputs).lower().check_fully_delegated().to_executorch().run()
        tester.compare(atol=1e-2, rtol=1e-2)
    else:
        tester = QuantTester(module, inputs, quant_dtype).lower().check_fully_delegated().to_executorch().run()
        # measured 89.6% exact, max 7 (the far-out grid points of REFLECTION_BOUNDS_8BIT)
        tester.compare_steps(max_step_diff=REFLECTION_BOUNDS_8BIT[0], min_exact=0.85)
    assert tester.payload().op_types().get("GridSample") == 4
    if QNN_LOADED:
        steps = 0 if quant_dtype is None else GRID3D_BOUNDS_8BIT[0]
        assert_qnn_matches_host(one_delegate_blob(tester), inputs, module, 2e-2, steps)


class RealVision(nn.Module):
    """Small: cdist (p = 2, 1) and pdist, unfold (Pad + Gather), a 3-D max pool with padding and ceil_mode, a uniform
    adaptive one, a fused Llama RMSNorm, and grid_sample in every supported mode / padding /
    align_corners."""

    def __init__(self):
        super().__init__()
        self.norm = LlamaRmsNorm(8)

    def forward(self, x5, seq, x, grid, grid_aligned, grid_half):
        return (
            torch.cdist(seq, seq[:, :2]),
            torch.cdist(seq, seq, p=1.0),
            torch.pdist(seq[0]),
            F.unfold(x, 2, padding=1, stride=(1, 2)),
            F.max_pool3d(x5, (2, 3, 2), (1, 2, 2), (1, 1, 0), ceil_mode=True),
            F.adaptive_max_pool3d(x5, (1, 2, 2)),
            self.norm(seq),
            F.grid_sample(x, grid, "bilinear", "zeros", align_corners=False),
            F.grid_sample(x, grid, "bilinear", "border", align_corners=True),
            F.grid_sample(x, grid, "bilinear", "zeros", align_corners=True),
            F.grid_sample(x, grid_aligned, "nearest", "zeros", align_corners=True),
            F.grid_sample(x, grid_half, "nearest", "border", align_corners=False),
            F.grid_sample(x, grid_half, "nearest", "zeros", align_corners=False),
        )


def real_inputs() -> Tuple[torch.Tensor, ...]:
    x, grid, grid_aligned, grid_half = grid_inputs(1, 4, 5, 3, 4)
    return randn(1, 2, 3, 5, 4, seed=10), randn(1, 3, 8, seed=11), x[:, :2], grid, grid_aligned, grid_half


@needs_qnn
@pytest.mark.parametrize("quant_dtype", [None, A8W8, A16W8], ids=["fp16", "8a8w", "16a8w"])
def test_real_qnn_matches_host(real_qnn, quant_dtype):
    """QNN 2.51 HTP emulation vs the host engine, one delegate (QNN validated and finalized the
    distance chains, the PoolMax2d pairs, the RmsNorm and GridSample in each precision).
    Measured: fp16 max |qnn - host| 2e-3 (cdist), 2.4e-7 (pools, RmsNorm 1e-6), GridSample
    bilinear 4.9e-4 and nearest 2.4e-7; 8a8w max 1 step on every output; 16a8w up to 18 steps
    (cdist) and 12 (pools, GridSample), as the 16-bit data movement ops of ops/test_resize_norm:
    the graph inputs' 16-bit Quantize differs, not the ops."""
    inputs, module = real_inputs(), RealVision()
    if quant_dtype is None:
        tester = QnnTester(module, inputs)
        tester.edge = to_edge_transform_and_lower_to_qnn(module, inputs, tester.compile_specs)
    else:
        tester = QuantTester(module, inputs, quant_dtype).lower()
    blob = one_delegate_blob(tester)
    types = tester.payload().op_types()
    assert types.get("PoolMax2d") == 4 and types.get("RmsNorm") == 1 and types.get("GridSample") == 6, types
    assert_qnn_matches_host(blob, inputs, module, 2e-2, 1 if quant_dtype == A8W8 else 64)
