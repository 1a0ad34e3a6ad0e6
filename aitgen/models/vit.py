"""ViT-B/16 as in torchvision's `vit_b_16`: patch conv, class token, learned positions, pre-LN
encoder blocks (LayerNorm eps 1e-6, GELU erf MLP), final LayerNorm, linear head on the class token.

Names follow torchvision (conv_proj, class_token, encoder.pos_embedding, encoder.layers.N.ln_1,
.self_attention, .ln_2, .mlp.0/.mlp.3, encoder.ln, heads.head), except that attention holds
separate q/k/v projections where torch packs them into one in_proj_weight (split it to load).
torchvision zero-initialises the class token and head; here they draw random values so that
every parameter shows up in the numbers a test compares.
"""
from __future__ import annotations

from .. import ops
from ..frontend import nn
from ..frontend.nn import init
from ..ir.tensor import Tensor
from ._common import DimArg, image_input

LN_EPS = 1e-6


class MLPBlock(nn.Sequential):
    def __init__(self, hidden: int, mlp: int):
        # Same indices as torchvision's MLPBlock: 0 Linear, 1 GELU, 2 Dropout, 3 Linear, 4 Dropout.
        super().__init__(nn.Linear(hidden, mlp), nn.GELU(), nn.Dropout(0.0), nn.Linear(mlp, hidden),
                         nn.Dropout(0.0))


class EncoderBlock(nn.Module):
    def __init__(self, hidden: int, heads: int, mlp: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden, eps=LN_EPS)
        self.self_attention = nn.MultiheadAttention(hidden, heads)
        self.dropout = nn.Dropout(0.0)
        self.ln_2 = nn.LayerNorm(hidden, eps=LN_EPS)
        self.mlp = MLPBlock(hidden, mlp)

    def forward(self, x: Tensor) -> Tensor:
        x = ops.add(x, self.dropout(self.self_attention(self.ln_1(x))), name=self._op_name("residual_attn"))
        return ops.add(x, self.mlp(self.ln_2(x)), name=self._op_name("residual_mlp"))


class Encoder(nn.Module):
    def __init__(self, seq_len: int, layers: int, hidden: int, heads: int, mlp: int):
        super().__init__()
        self.pos_embedding = nn.Parameter(init.normal((1, seq_len, hidden), std=0.02))
        self.dropout = nn.Dropout(0.0)
        self.layers = nn.ModuleList([EncoderBlock(hidden, heads, mlp) for _ in range(layers)])
        self.ln = nn.LayerNorm(hidden, eps=LN_EPS)

    def forward(self, x: Tensor) -> Tensor:
        x = self.dropout(ops.add(x, self.pos_embedding, name=self._op_name("add_position")))
        for layer in self.layers:
            x = layer(x)
        return self.ln(x)


class Heads(nn.Module):
    """torchvision's `heads` Sequential holding one Linear named `head` (no pre-logits layer)."""

    def __init__(self, hidden: int, num_classes: int):
        super().__init__()
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(x)


class VisionTransformer(nn.Module):
    def __init__(self, image_size=224, patch=16, layers=12, hidden=768, heads=12, mlp=3072,
                 num_classes=1000):
        super().__init__()
        if image_size % patch:
            raise ValueError(f"vit_b16: image_size {image_size} is not a multiple of patch {patch}")
        if hidden % heads:
            raise ValueError(f"vit_b16: hidden {hidden} is not a multiple of heads {heads}")
        self.hidden = hidden
        self.conv_proj = nn.Conv2d(3, hidden, patch, stride=patch)
        self.class_token = nn.Parameter(init.normal((1, 1, hidden), std=0.02))
        self.encoder = Encoder((image_size // patch) ** 2 + 1, layers, hidden, heads, mlp)
        self.heads = Heads(hidden, num_classes)

    def _name(self, what: str) -> str:
        # The top-level module has no path; its ops still get names the printed graph can show.
        return self._op_name(what) or what

    def forward(self, x: Tensor) -> Tensor:
        n = x.shape[0]
        p = self.conv_proj(x)  # [N, H/p, W/p, hidden]
        # NHWC already has patches row-major with channels last: torchvision's
        # reshape + permute(0, 2, 1) from NCHW becomes a plain reshape here.
        p = ops.reshape(p, [n, p.shape[1] * p.shape[2], self.hidden], name=self._name("patches"))
        cls = ops.expand(self.class_token, [n, 1, self.hidden], name=self._name("class_tokens"))
        x = self.encoder(ops.concat([cls, p], axis=1, name=self._name("tokens")))
        cls_out = ops.slice(x, [0], [1], axes=[1], name=self._name("class_out"))
        cls_out = ops.reshape(cls_out, [n, self.hidden], name=self._name("class_out_2d"))
        return self.heads(cls_out)


def create(batch: DimArg = 1, image_size: int = 224, patch: int = 16, layers: int = 12, hidden: int = 768,
           heads: int = 12, mlp: int = 3072, num_classes: int = 1000):
    module = VisionTransformer(image_size, patch, layers, hidden, heads, mlp, num_classes)
    return module, {"x": image_input(batch, image_size)}


def forward(module: VisionTransformer, inputs: dict[str, Tensor]) -> dict[str, Tensor]:
    return {"logits": module(inputs["x"])}
