"""GPT-2 (small) as in HF transformers' `GPT2LMHeadModel`: token + position embeddings, pre-LN
blocks (eps 1e-5) with causal self-attention and a "gelu_new" (tanh) MLP, ln_f, and an LM head
tied to the token embedding.

Names follow HF (transformer.wte, transformer.h.N.ln_1, .attn, .ln_2, .mlp.c_fc, .mlp.c_proj,
transformer.ln_f). Two differences in storage, not in math: HF's Conv1D keeps weights [in, out]
where nn.Linear keeps [out, in] (transpose to load), and HF packs Q/K/V into one c_attn while
nn.MultiheadAttention holds q_proj/k_proj/v_proj (split c_attn's columns in three to load).
"""
from __future__ import annotations

from .. import ops
from ..frontend import nn
from ..ir.tensor import Tensor
from ._common import DimArg, check_seq, position_rows, token_input

LN_EPS = 1e-5


class GPT2MLP(nn.Module):
    def __init__(self, hidden: int, inner: int):
        super().__init__()
        self.c_fc = nn.Linear(hidden, inner)
        self.c_proj = nn.Linear(inner, hidden)
        self.act = nn.GELU(approximate="tanh")  # HF "gelu_new"
        self.dropout = nn.Dropout(0.1)

    def forward(self, x: Tensor) -> Tensor:
        return self.dropout(self.c_proj(self.act(self.c_fc(x))))


class GPT2Block(nn.Module):
    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden, eps=LN_EPS)
        self.attn = nn.MultiheadAttention(hidden, heads)
        self.ln_2 = nn.LayerNorm(hidden, eps=LN_EPS)
        self.mlp = GPT2MLP(hidden, 4 * hidden)

    def forward(self, x: Tensor) -> Tensor:
        x = ops.add(x, self.attn(self.ln_1(x), causal=True), name=self._op_name("residual_attn"))
        return ops.add(x, self.mlp(self.ln_2(x)), name=self._op_name("residual_mlp"))


class GPT2Model(nn.Module):
    def __init__(self, layers: int, hidden: int, heads: int, vocab: int, max_position: int):
        super().__init__()
        if hidden % heads:
            raise ValueError(f"gpt2: hidden {hidden} is not a multiple of heads {heads}")
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(max_position, hidden)
        self.drop = nn.Dropout(0.1)
        self.h = nn.ModuleList([GPT2Block(hidden, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(hidden, eps=LN_EPS)

    def forward(self, input_ids: Tensor) -> Tensor:
        # [seq, H] positions broadcast over the batch, as HF's [1, seq] position_ids do.
        pos = position_rows(self.wpe.weight, input_ids.shape[1], self.wpe._op_name())
        x = self.drop(ops.add(self.wte(input_ids), pos, name=self._op_name("add_position")))
        for block in self.h:
            x = block(x)
        return self.ln_f(x)


class GPT2LMHeadModel(nn.Module):
    def __init__(self, layers=12, hidden=768, heads=12, vocab=50257, max_position=1024):
        super().__init__()
        self.transformer = GPT2Model(layers, hidden, heads, vocab, max_position)

    def forward(self, input_ids: Tensor) -> Tensor:
        h = self.transformer(input_ids)
        # Tied head: logits = h @ wte^T reads the embedding table itself ([V, H] is the 'c' operand
        # of an rcr GEMM), so the model stores the 38 M-parameter table once, as HF does.
        return ops.gemm(h, self.transformer.wte.weight, layout="rcr", name="lm_head")


def create(batch: DimArg = 1, seq: DimArg = 128, layers: int = 12, hidden: int = 768, heads: int = 12,
           vocab: int = 50257, max_position: int = 1024):
    check_seq(seq, max_position)
    module = GPT2LMHeadModel(layers, hidden, heads, vocab, max_position)
    return module, {"input_ids": token_input(batch, seq, "input_ids")}


def forward(module: GPT2LMHeadModel, inputs: dict[str, Tensor]) -> dict[str, Tensor]:
    return {"logits": module(inputs["input_ids"])}
