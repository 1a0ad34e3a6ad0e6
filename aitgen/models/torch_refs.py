"""Hand-written torch twins of the zoo models (NCHW, torch.nn primitives only).

No torchvision or transformers: the tests must not depend on them, and writing each model out a
second time in another framework is the point of the check. Parameter names match the aitgen
modules one for one, so `load_aitgen_weights` needs only layout conversions (OHWI -> OIHW).
Attention is spelt out (matmul, softmax) rather than taken from F.scaled_dot_product_attention,
so that it checks aitgen's attention op instead of sharing its assumptions.

Used by the zoo tests (float64, as a numerics reference) and by benchmarks/cpu_vs_peers.py (float32,
as the torch-eager and ONNX peers). torch is an optional dependency (`pip install aitgen[torch]`):
nothing in aitgen imports this module, and importing it without torch raises an ImportError that
says so.

    ref = torch_refs.from_aitgen("bert_base", module, config)              # float64, eval mode
    ref = torch_refs.from_aitgen("resnet50", module, config, torch.float32)
"""
from __future__ import annotations

import inspect
import math

import numpy as np

try:
    import torch
    import torch.nn.functional as F
    from torch import nn
except ImportError as e:  # the twins subclass torch.nn.Module, so there is nothing to offer without it
    raise ImportError("aitgen.models.torch_refs needs torch (pip install 'aitgen[torch]')") from e


# -- shared pieces ---------------------------------------------------------------------------

class MHA(nn.Module):
    """Multi-head self-attention with separate q/k/v/out projections; additive mask or causal."""

    def __init__(self, embed: int, heads: int, names=("q_proj", "k_proj", "v_proj", "out_proj")):
        super().__init__()
        self.heads, self.names = heads, names
        for n in names:
            if n is not None:
                setattr(self, n, nn.Linear(embed, embed))

    def core(self, x, mask=None, causal=False):
        b, s, e = x.shape
        q, k, v = (getattr(self, n)(x).view(b, s, self.heads, -1).transpose(1, 2) for n in self.names[:3])
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores + mask
        if causal:
            keep = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
            scores = scores.masked_fill(~keep, float("-inf"))
        return (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, e)

    def forward(self, x, mask=None, causal=False):
        return getattr(self, self.names[3])(self.core(x, mask, causal))


def conv_bn(cin, cout, k, stride=1, groups=1):
    return [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]


def load_aitgen_weights(model: nn.Module, state: dict, dtype: torch.dtype = torch.float64) -> nn.Module:
    """Copy an aitgen state_dict (name -> array or constant Tensor) into `model`, strictly; return it
    in eval mode, converted to `dtype` (float64 by default: a reference that adds no rounding)."""
    mine = dict(model.state_dict())
    tracked = {k for k in mine if k.endswith("num_batches_tracked")}
    missing = set(mine) - tracked - set(state)
    extra = set(state) - set(mine)
    assert not missing and not extra, f"missing {sorted(missing)[:5]}, unexpected {sorted(extra)[:5]}"
    with torch.no_grad():
        for k, v in state.items():
            a = np.asarray(getattr(v, "value", v), dtype=np.float64)
            if a.ndim == 4:  # conv weight: OHWI -> OIHW
                a = a.transpose(0, 3, 1, 2)
            assert tuple(a.shape) == tuple(mine[k].shape), (k, a.shape, tuple(mine[k].shape))
            mine[k].copy_(torch.from_numpy(np.ascontiguousarray(a)))
    return model.to(dtype).eval()


# -- ResNet-50 v1.5 ---------------------------------------------------------------------------

class Bottleneck(nn.Module):
    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(inplanes, planes, 1, bias=False), nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3, self.bn3 = nn.Conv2d(planes, planes * 4, 1, bias=False), nn.BatchNorm2d(planes * 4)
        self.downsample = downsample

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNet(nn.Module):
    def __init__(self, layers=(3, 4, 6, 3), width=64, num_classes=1000):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width)
        inplanes = width
        for i, n in enumerate(layers):
            planes, stride = width * 2 ** i, 1 if i == 0 else 2
            ds = None
            if stride != 1 or inplanes != planes * 4:
                ds = nn.Sequential(nn.Conv2d(inplanes, planes * 4, 1, stride, bias=False), nn.BatchNorm2d(planes * 4))
            blocks = [Bottleneck(inplanes, planes, stride, ds)]
            inplanes = planes * 4
            blocks += [Bottleneck(inplanes, planes) for _ in range(1, n)]
            setattr(self, f"layer{i + 1}", nn.Sequential(*blocks))
        self.fc = nn.Linear(inplanes, num_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# -- MobileNetV2 ----------------------------------------------------------------------------

def _make_divisible(v, divisor=8):
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


def conv_bn_relu6(cin, cout, k=3, stride=1, groups=1):
    return nn.Sequential(*conv_bn(cin, cout, k, stride, groups), nn.ReLU6())


class InvertedResidual(nn.Module):
    def __init__(self, inp, oup, stride, t):
        super().__init__()
        hidden = int(round(inp * t))
        self.res = stride == 1 and inp == oup
        layers = [conv_bn_relu6(inp, hidden, 1)] if t != 1 else []
        layers += [conv_bn_relu6(hidden, hidden, 3, stride, hidden), *conv_bn(hidden, oup, 1)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.conv(x) if self.res else self.conv(x)


class MobileNetV2(nn.Module):
    CFG = [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 3, 2], [6, 64, 4, 2], [6, 96, 3, 1], [6, 160, 3, 2], [6, 320, 1, 1]]

    def __init__(self, width=1.0, num_classes=1000):
        super().__init__()
        cin, last = _make_divisible(32 * width), _make_divisible(1280 * max(1.0, width))
        feats = [conv_bn_relu6(3, cin, 3, 2)]
        for t, c, n, s in self.CFG:
            cout = _make_divisible(c * width)
            for i in range(n):
                feats.append(InvertedResidual(cin, cout, s if i == 0 else 1, t))
                cin = cout
        feats.append(conv_bn_relu6(cin, last, 1))
        self.features = nn.Sequential(*feats)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(self.features(x), 1), 1))


# -- BERT -----------------------------------------------------------------------------------

class _Holder(nn.Module):
    """A bare container, for HF's nesting of names (attention.self.query, attention.output.dense)."""


class BertLayer(nn.Module):
    def __init__(self, h, heads, inter):
        super().__init__()
        self.attention = _Holder()
        self.attention.self = MHA(h, heads, names=("query", "key", "value", None))
        self.attention.output = _Holder()
        self.attention.output.dense, self.attention.output.LayerNorm = nn.Linear(h, h), nn.LayerNorm(h, 1e-12)
        self.intermediate = _Holder()
        self.intermediate.dense = nn.Linear(h, inter)
        self.output = _Holder()
        self.output.dense, self.output.LayerNorm = nn.Linear(inter, h), nn.LayerNorm(h, 1e-12)

    def forward(self, x, mask):
        a = self.attention.output
        x = a.LayerNorm(a.dense(self.attention.self.core(x, mask)) + x)
        y = self.output.dense(F.gelu(self.intermediate.dense(x)))
        return self.output.LayerNorm(y + x)


class Bert(nn.Module):
    def __init__(self, layers=12, hidden=768, heads=12, intermediate=3072, vocab=30522, max_position=512,
                 type_vocab=2):
        super().__init__()
        self.embeddings = _Holder()
        e = self.embeddings
        e.word_embeddings, e.position_embeddings = nn.Embedding(vocab, hidden), nn.Embedding(max_position, hidden)
        e.token_type_embeddings, e.LayerNorm = nn.Embedding(type_vocab, hidden), nn.LayerNorm(hidden, 1e-12)
        self.encoder = _Holder()
        self.encoder.layer = nn.ModuleList([BertLayer(hidden, heads, intermediate) for _ in range(layers)])
        self.pooler = _Holder()
        self.pooler.dense = nn.Linear(hidden, hidden)

    def forward(self, input_ids, token_type_ids, attention_mask):
        e = self.embeddings
        pos = torch.arange(input_ids.shape[1], device=input_ids.device)[None]
        x = e.word_embeddings(input_ids) + e.position_embeddings(pos) + e.token_type_embeddings(token_type_ids)
        x = e.LayerNorm(x)
        mask = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.encoder.layer:
            x = layer(x, mask)
        return x, torch.tanh(self.pooler.dense(x[:, 0]))


# -- ViT ------------------------------------------------------------------------------------

class ViTBlock(nn.Module):
    def __init__(self, hidden, heads, mlp):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(hidden, 1e-6), nn.LayerNorm(hidden, 1e-6)
        self.self_attention = MHA(hidden, heads)
        self.mlp = nn.Sequential(nn.Linear(hidden, mlp), nn.GELU(), nn.Dropout(0.0), nn.Linear(mlp, hidden))

    def forward(self, x):
        x = x + self.self_attention(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class ViT(nn.Module):
    def __init__(self, image_size=224, patch=16, layers=12, hidden=768, heads=12, mlp=3072, num_classes=1000):
        super().__init__()
        self.conv_proj = nn.Conv2d(3, hidden, patch, patch)
        self.class_token = nn.Parameter(torch.zeros(1, 1, hidden))
        self.encoder = _Holder()
        self.encoder.pos_embedding = nn.Parameter(torch.zeros(1, (image_size // patch) ** 2 + 1, hidden))
        self.encoder.layers = nn.ModuleList([ViTBlock(hidden, heads, mlp) for _ in range(layers)])
        self.encoder.ln = nn.LayerNorm(hidden, 1e-6)
        self.heads = _Holder()
        self.heads.head = nn.Linear(hidden, num_classes)

    def forward(self, x):
        p = self.conv_proj(x).flatten(2).transpose(1, 2)  # torchvision's _process_input
        x = torch.cat([self.class_token.expand(x.shape[0], -1, -1), p], 1) + self.encoder.pos_embedding
        for layer in self.encoder.layers:
            x = layer(x)
        return self.heads.head(self.encoder.ln(x)[:, 0])


# -- GPT-2 ----------------------------------------------------------------------------------

class GPT2Block(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(hidden, 1e-5), nn.LayerNorm(hidden, 1e-5)
        self.attn = MHA(hidden, heads)
        self.mlp = _Holder()
        self.mlp.c_fc, self.mlp.c_proj = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x), causal=True)
        return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, layers=12, hidden=768, heads=12, vocab=50257, max_position=1024):
        super().__init__()
        self.transformer = _Holder()
        t = self.transformer
        t.wte, t.wpe = nn.Embedding(vocab, hidden), nn.Embedding(max_position, hidden)
        t.h = nn.ModuleList([GPT2Block(hidden, heads) for _ in range(layers)])
        t.ln_f = nn.LayerNorm(hidden, 1e-5)

    def forward(self, input_ids):
        t = self.transformer
        x = t.wte(input_ids) + t.wpe(torch.arange(input_ids.shape[1], device=input_ids.device)[None])
        for block in t.h:
            x = block(x)
        return t.ln_f(x) @ t.wte.weight.T  # tied LM head


REFS = {"resnet50": ResNet, "mobilenet_v2": MobileNetV2, "bert_base": Bert, "vit_b16": ViT, "gpt2": GPT2}


def from_aitgen(name: str, module, config: dict, dtype: torch.dtype = torch.float64) -> nn.Module:
    """The torch twin of zoo model `name`, holding the weights of the aitgen `module` built with
    `config`. Keys that describe the input rather than the architecture (batch, seq, image_size,
    dtype) are dropped, as the twins take the shape from their input."""
    cls = REFS[name]
    cfg = {k: v for k, v in config.items() if k in inspect.signature(cls).parameters}
    return load_aitgen_weights(cls(**cfg), module.state_dict(), dtype)
