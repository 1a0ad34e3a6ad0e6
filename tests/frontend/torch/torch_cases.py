"""Small torch modules, one op family each, for the torch.export importer tests.

Every case is (module, example args): forward returns a tuple of tensors that cover the family's
overloads and argument forms. Inputs are positive where an op needs it (log, sqrt, pow).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

import aitgen as ag

g = torch.Generator().manual_seed(0)


def randn(*shape):
    return torch.randn(*shape, generator=g)


def randint(lo, hi, *shape):
    return torch.randint(lo, hi, shape, generator=g)


class Arith(nn.Module):
    def forward(self, x, y, i):
        return (x + y * 2 - 3, torch.add(x, y, alpha=2), torch.sub(x, y, alpha=0.5), 1 - x, x / y, 2.0 / y,
                x ** 2, x.abs() ** 1.5, torch.pow(2.0, x), torch.maximum(x, y), torch.minimum(x, y),
                torch.div(x, 0.7, rounding_mode="floor"), torch.div(x, 0.7, rounding_mode="trunc"),
                torch.remainder(x, 0.7), i + 0.5, i / 2, i * 3 - 1, torch.div(i, 3, rounding_mode="floor"),
                i.float() * x)


class Unary(nn.Module):
    def forward(self, x):
        p = x.abs() + 0.1
        out = [F.relu(x), torch.sigmoid(x), torch.tanh(x), torch.exp(x), torch.log(p), torch.sqrt(p),
               torch.rsqrt(p), torch.erf(x), -x, x.abs(), torch.reciprocal(p), F.gelu(x), F.gelu(x, approximate="tanh"),
               F.silu(x), F.hardswish(x), F.hardsigmoid(x), F.hardtanh(x, -0.5, 0.5), F.relu6(x * 4),
               torch.clamp(x, min=-0.2, max=0.3), torch.clamp(x, min=0.1), F.leaky_relu(x, 0.1), F.elu(x),
               F.softplus(x), torch.log1p(p), torch.expm1(x), torch.floor(x * 3), F.mish(x)]
        if hasattr(ag.ops, "sin"):
            out += [torch.sin(x), torch.cos(x)]
        return tuple(out)


class Logic(nn.Module):
    def forward(self, x, y, i):
        m = x > y
        return (x == y, x < 0.5, torch.ge(i, 2), i != 3, torch.where(m, x, y), torch.where(x > 0, x, 0.0),
                x.masked_fill(m, -1.0), m & (y > 0), m | (y > 0), ~m, torch.logical_xor(m, y > 0),
                (x > 0).float(), x.to(torch.int32), i.to(torch.float32), torch.clamp(x, min=y))


class Reduce(nn.Module):
    def forward(self, x, b):
        v, idx = torch.max(x, dim=1)
        return (x.sum(), x.sum(dim=(1, 2)), x.mean(-1, keepdim=True), x.amax(dim=[0, 2]), x.amin(1), v, idx,
                x.var(-1), x.var(dim=1, correction=0, keepdim=True), x.std(-1), x.argmax(-1), x.argmin(1, keepdim=True),
                torch.logsumexp(x, -1), torch.linalg.vector_norm(x, dim=-1), b.any(-1), b.all(1), x.mean(),
                F.normalize(x, dim=-1), F.softmax(x, 1), F.log_softmax(x, -1))


class Linalg(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 5)
        self.nobias = nn.Linear(6, 4, bias=False)

    def forward(self, x, a, b, c):
        return (self.fc(x), self.nobias(x), x @ self.fc.weight.t(), torch.mm(x, a), torch.bmm(b, c),
                torch.matmul(b.unsqueeze(0), c.unsqueeze(0).transpose(-1, -2).transpose(-1, -2)),
                torch.addmm(self.fc.bias, x, self.fc.weight.t(), beta=0.5, alpha=2.0),
                torch.baddbmm(b[:, :, :1], b, c, alpha=0.5), b.transpose(1, 2) @ b, x.t() @ x)


class Shapes(nn.Module):
    def forward(self, x, i):
        a, b2 = x.split([1, 2], dim=1)
        c0, c1 = x.chunk(2, dim=-1)
        u = x.unbind(0)
        return (x.view(2, -1), x.reshape(6, 4), x.flatten(1), x.permute(2, 0, 1).contiguous(), x.transpose(0, 1) * 1,
                x.unsqueeze(1), x[:, :1].squeeze(1), x[:, 0:1].expand(2, 5, 4), torch.cat([x, x * 2], 1),
                a, b2, c0, c1, u[1], x[:, 1:3:2], x[..., -1], x[1], x.index_select(2, i), x[:, i.clamp(max=2)], x.flip(-1),
                x.repeat(1, 2, 1), torch.tril(x[0]), torch.triu(x[0], 1), F.pad(x, (1, 2)), F.pad(x, (0, 0, -1, 1), value=3.0),
                torch.arange(4) * 2, torch.full((2, 3), 1.5), torch.zeros_like(x) + 1, x.new_ones(3),
                torch.arange(1, 8, 3).float(), x.sum(0, keepdim=True).expand(2, 3, 4))


class Convs(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.dw = nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8, bias=False)
        self.g = nn.Conv2d(8, 6, 3, padding=2, dilation=2, groups=2)
        self.up = nn.ConvTranspose2d(6, 4, 3, stride=2, padding=1, output_padding=1, groups=2)
        self.c1d = nn.Conv1d(3, 5, 3, stride=2, padding=1)
        self.bn1d = nn.BatchNorm1d(5)
        self.gn = nn.GroupNorm(2, 8)
        self.ln = nn.LayerNorm([8, 8])
        self.scale = nn.Parameter(torch.randn(8, 1, 1, generator=g))
        with torch.no_grad():  # running statistics that are not the identity
            self.bn.running_mean.copy_(torch.randn(8, generator=g))
            self.bn.running_var.copy_(torch.rand(8, generator=g) + 0.5)
            self.bn1d.running_mean.copy_(torch.randn(5, generator=g))

    def forward(self, x, s):
        y = F.relu(self.bn(self.c1(x)))           # NHWC from here
        z = y * self.scale + 1                    # a [C, 1, 1] parameter broadcast into the NHWC layout
        d = self.dw(z)
        h = self.g(d)
        t = self.up(h)
        e = self.c1d(s)
        return (y.mean((2, 3), keepdim=True), y.mean(1), F.softmax(y, 1), torch.cat([y, z], 1), d, h, t,
                F.max_pool2d(y, 3, 2, 1), F.max_pool2d(y, 2, ceil_mode=True), F.avg_pool2d(y, 3, 2, 1, count_include_pad=False),
                F.adaptive_avg_pool2d(y, 1).flatten(1), F.adaptive_avg_pool2d(y, 2), F.adaptive_max_pool2d(y, 1),
                self.gn(z), self.ln(z), F.interpolate(h, scale_factor=2), e, self.bn1d(e), y.flatten(1),
                F.pad(y, (1, 1, 2, 0), mode="reflect"), y[:, 2:6] * 2, y.chunk(2, 1)[1] + 1)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 8)

    def forward(self, q, k, v, mask, ids):
        return (F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3),
                (q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])).softmax(-1) @ v,
                self.emb(ids), self.emb.weight[ids[0]])


CASES = {
    "arith": (Arith, lambda: (randn(2, 3, 4), randn(2, 3, 4).abs() + 0.5, randint(-5, 5, 2, 3, 4))),
    "unary": (Unary, lambda: (randn(2, 3, 4),)),
    "logic": (Logic, lambda: (randn(2, 3, 4), randn(2, 3, 4), randint(0, 4, 2, 3, 4))),
    "reduce": (Reduce, lambda: (randn(2, 3, 4), randn(2, 3, 4) > 0)),
    "linalg": (Linalg, lambda: (randn(3, 6), randn(6, 2), randn(2, 3, 4), randn(2, 4, 5))),
    "shapes": (Shapes, lambda: (randn(2, 3, 4), torch.tensor([2, 0, 3]))),
    "convs": (Convs, lambda: (randn(2, 3, 8, 8), randn(2, 3, 9))),
    "attention": (Attention, lambda: (randn(2, 2, 4, 8), randn(2, 2, 6, 8), randn(2, 2, 6, 8), randn(4, 6),
                                      randint(0, 20, 2, 5))),
}
