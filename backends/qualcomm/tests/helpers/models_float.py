"""Small float modules used by TestQNNFloatingPointOperator (one per op family)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


class Conv2d(torch.nn.Module):
    def __init__(self, cin, cout, k, stride=1, padding=0, dilation=1, groups=1, bias=True):
        super().__init__()
        self.conv = torch.nn.Conv2d(cin, cout, k, stride, padding, dilation, groups, bias)

    def forward(self, x):
        return self.conv(x)


class MatMul(torch.nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)


class Bmm(torch.nn.Module):
    def forward(self, a, b):
        return torch.bmm(a, b)


class AddMm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(8, 3))
        self.b = torch.nn.Parameter(torch.randn(3))

    def forward(self, x):
        return torch.addmm(self.b, x, self.w)


class AddMmScaled(AddMm):
    """addmm with beta / alpha (upstream's float addmm case), and beta = 0 (the bias ignored)."""

    def forward(self, x):
        return torch.addmm(self.b, x, self.w, beta=0.5, alpha=2.0), torch.addmm(self.b, x, self.w, beta=0, alpha=-1)


_BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div}


class Binary(torch.nn.Module):
    def __init__(self, op):
        super().__init__()
        self.op = _BINARY[op]

    def forward(self, a, b):
        return self.op(a, b + 3.0 if self.op is torch.div else b)


class BinaryScalar(torch.nn.Module):
    def __init__(self, op, scalar):
        super().__init__()
        self.op, self.scalar = op, scalar

    def forward(self, x):
        if self.op == "rsub":
            return self.scalar - x
        return _BINARY[self.op](x, self.scalar)


class AddAlpha(torch.nn.Module):
    def forward(self, a, b):
        return torch.add(a, b, alpha=0.5) - torch.sub(a, b, alpha=2.0)


ACTIVATIONS = {
    "relu": torch.relu,
    "hardtanh": lambda x: F.hardtanh(x, -0.5, 0.75),
    "relu6": F.relu6,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "gelu": F.gelu,
    "silu": F.silu,
    "hardswish": F.hardswish,
}
# Elementwise math ops (RMSNorm, rotary embedding); sqrt / rsqrt / fractional pow see x*x + 0.5 > 0.
MATH_OPS = {
    "rsqrt": lambda x: torch.rsqrt(x * x + 0.5),
    "sqrt": lambda x: torch.sqrt(x * x + 0.5),
    "neg": torch.neg,
    "abs": torch.abs,
    "pow_2": lambda x: x.pow(2),
    "pow_3": lambda x: x**3,
    "pow_half": lambda x: (x * x + 0.5).pow(0.5),
}


class Activation(torch.nn.Module):
    def __init__(self, name):
        super().__init__()
        self.name = name

    def forward(self, x):
        if self.name == "gelu_tanh":
            return F.gelu(x, approximate="tanh")
        return ACTIVATIONS[self.name](x * 3.0)


class Softmax(torch.nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.softmax(x, self.dim)


class LayerNorm(torch.nn.Module):
    def __init__(self, normalized, affine=True):
        super().__init__()
        self.norm = torch.nn.LayerNorm(normalized, elementwise_affine=affine)
        if affine:
            torch.nn.init.normal_(self.norm.weight)
            torch.nn.init.normal_(self.norm.bias)

    def forward(self, x):
        return self.norm(x)


def _randomize_bn(bn):
    with torch.no_grad():
        bn.running_mean.normal_()
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.normal_()
        bn.bias.normal_()
    return bn


class BatchNorm(torch.nn.Module):
    def __init__(self, channels, rank=4):
        super().__init__()
        bn_cls = torch.nn.BatchNorm2d if rank == 4 else torch.nn.BatchNorm1d
        self.bn = _randomize_bn(bn_cls(channels))

    def forward(self, x):
        return self.bn(x)


class ConvBatchNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = _randomize_bn(torch.nn.BatchNorm2d(8))

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


class Mean(torch.nn.Module):
    def __init__(self, dims, keepdim):
        super().__init__()
        self.dims, self.keepdim = dims, keepdim

    def forward(self, x):
        return x.mean(self.dims, keepdim=self.keepdim)


class ConvMean(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3)

    def forward(self, x):
        return self.conv(x).mean([2, 3])


class Sum(Mean):
    def forward(self, x):
        return x.sum(self.dims, keepdim=self.keepdim)


class AvgPool(torch.nn.Module):
    def __init__(self, k, s, p, count_include_pad):
        super().__init__()
        self.pool = torch.nn.AvgPool2d(k, s, p, count_include_pad=count_include_pad)

    def forward(self, x):
        return self.pool(x)


class MaxPool(torch.nn.Module):
    def __init__(self, k, s, p):
        super().__init__()
        self.pool = torch.nn.MaxPool2d(k, s, p)

    def forward(self, x):
        return self.pool(x)


class AdaptiveAvgPool(torch.nn.Module):
    def __init__(self, out):
        super().__init__()
        self.pool = torch.nn.AdaptiveAvgPool2d(out)

    def forward(self, x):
        return self.pool(x)


_SHAPE_OPS = {
    "view": lambda x: x.view(6, 4),
    "reshape": lambda x: x.reshape(4, -1),
    "permute": lambda x: x.permute(2, 0, 1),
    "transpose": lambda x: x.transpose(0, 2),
    "t": lambda x: x.t(),
    "unsqueeze": lambda x: x.unsqueeze(1),
    "squeeze": lambda x: x.squeeze(1),
    "expand": lambda x: x.expand(3, 5),
    "expand_rank": lambda x: x.expand(2, 3, 4),
    "flatten": lambda x: x.flatten(1),
    "select": lambda x: x[:, 1],
    "select_neg": lambda x: x[-1],
}


class Shape(torch.nn.Module):
    def __init__(self, op):
        super().__init__()
        self.op = _SHAPE_OPS[op]

    def forward(self, x):
        return self.op(x + 1.0)


class Cat(torch.nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, a, b):
        return torch.cat([a, b, a * 2.0], self.dim)


class ConvCat(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.c2 = torch.nn.Conv2d(3, 5, 1)

    def forward(self, x):
        y = torch.cat([self.c1(x), torch.relu(self.c2(x))], 1)
        return torch.softmax(y, 1)[:, 2:7]


class Slice(torch.nn.Module):
    def __init__(self, dim, start, end, step):
        super().__init__()
        self.dim, self.start, self.end, self.step = dim, start, end, step

    def forward(self, x):
        index = (slice(None),) * (self.dim % 3) + (slice(self.start, self.end, self.step),)
        return (x * 2.0)[index]


class Embedding(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 6)

    def forward(self, idx):
        return self.emb(idx)


class ConvBias(torch.nn.Module):
    """Channel-last add with a lower-rank broadcast operand and a parameter operand."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.bias = torch.nn.Parameter(torch.randn(4, 1, 1))

    def forward(self, x):
        y = self.conv(x) + self.bias
        return y * x[0, 0] + x


class WithCumsum(torch.nn.Module):
    def forward(self, x):
        return torch.relu(torch.cumsum(torch.sigmoid(x), dim=1)) * 2.0


class ReluSigmoid(torch.nn.Module):
    def forward(self, x):
        return torch.sigmoid(torch.relu(x) + 1.0) * 3.0


class ConvReluConvLinear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = torch.nn.Conv2d(8, 4, 3, stride=2)
        self.fc = torch.nn.Linear(4 * 3 * 3, 10)

    def forward(self, x):
        return self.fc(self.c2(torch.relu(self.c1(x))).flatten(1))


class PadConv(torch.nn.Module):
    """TF-style asymmetric zero padding before a conv (as in EfficientNet-Lite)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, stride=2)

    def forward(self, x):
        return self.conv(F.pad(x, [1, 2, 0, 1]))


class CastRoundTrip(torch.nn.Module):
    def forward(self, x):
        return x.to(torch.int32).to(torch.float32) + 0.5


class Lambda(torch.nn.Module):
    """Wraps a function of the inputs as a module."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


class LlamaRmsNorm(torch.nn.Module):
    """transformers' LlamaRMSNorm: float() in, to(input dtype) out, weight last."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.linspace(0.5, 1.5, dim))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)


class ConvAddRelu(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x, y):
        return torch.relu(self.conv(x)) + y


class ConvLinearSoftmax(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.linear = torch.nn.Linear(8, 16)

    def forward(self, x, y):
        z = torch.relu(self.conv(x)) + y
        return torch.softmax(self.linear(z.mean(dim=(2, 3))), dim=-1)
