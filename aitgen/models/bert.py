"""BERT-base encoder as in HF transformers' `BertModel` (post-LN, GELU erf, LayerNorm eps 1e-12).

Parameter names follow HF (embeddings.word_embeddings, encoder.layer.0.attention.self.query, ...,
pooler.dense), and nn.Linear keeps torch's [out, in] weights, so an HF BertModel state_dict loads
key for key (less the `embeddings.position_ids` buffer older transformers versions save).
"""
from __future__ import annotations

from .. import ops
from ..frontend import nn
from ..ir.tensor import Tensor
from ._common import DimArg, additive_mask, check_seq, position_rows, token_input

LN_EPS = 1e-12


class BertEmbeddings(nn.Module):
    def __init__(self, vocab: int, hidden: int, max_position: int, type_vocab: int):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, hidden)
        self.position_embeddings = nn.Embedding(max_position, hidden)
        self.token_type_embeddings = nn.Embedding(type_vocab, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=LN_EPS)
        self.dropout = nn.Dropout(0.1)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor) -> Tensor:
        seq = input_ids.shape[1]
        x = ops.add(self.word_embeddings(input_ids), self.token_type_embeddings(token_type_ids),
                    name=self._op_name("add_token_type"))
        # [seq, H] broadcasts over the batch, as HF's [1, seq] position_ids do.
        pos = position_rows(self.position_embeddings.weight, seq, self.position_embeddings._op_name())
        x = ops.add(x, pos, name=self._op_name("add_position"))
        return self.dropout(self.LayerNorm(x))


class BertSelfAttention(nn.Module):
    def __init__(self, hidden: int, heads: int):
        super().__init__()
        if hidden % heads:
            raise ValueError(f"bert_base: hidden {hidden} is not a multiple of heads {heads}")
        self.heads, self.head_dim = heads, hidden // heads
        # Separate Q/K/V Linears as in HF; grouping them into one GEMM is a compiler pass's job.
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(0.1)

    def _split_heads(self, x: Tensor, which: str) -> Tensor:
        b, s, _ = x.shape
        x = ops.reshape(x, [b, s, self.heads, self.head_dim], name=self._op_name(f"{which}_split"))
        return ops.permute(x, [0, 2, 1, 3], name=self._op_name(f"{which}_heads"))

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        b, s, h = x.shape
        q, k, v = (self._split_heads(getattr(self, w)(x), w) for w in ("query", "key", "value"))
        ctx = ops.scaled_dot_product_attention(q, k, v, mask=mask, name=self._op_name("attn"))  # [B, heads, S, D]
        ctx = ops.permute(ctx, [0, 2, 1, 3], name=self._op_name("merge"))
        return ops.reshape(ctx, [b, s, h], name=self._op_name("merge_heads"))


class BertSelfOutput(nn.Module):
    """dense -> dropout -> LayerNorm(x + residual): the post-LN residual of each sub-block."""

    def __init__(self, in_features: int, hidden: int):
        super().__init__()
        self.dense = nn.Linear(in_features, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=LN_EPS)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x: Tensor, residual: Tensor) -> Tensor:
        return self.LayerNorm(ops.add(self.dropout(self.dense(x)), residual, name=self._op_name("residual")))


class BertAttention(nn.Module):
    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.self = BertSelfAttention(hidden, heads)  # HF's name for the attention core
        self.output = BertSelfOutput(hidden, hidden)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        return self.output(self.self(x, mask), x)


class BertIntermediate(nn.Module):
    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.dense = nn.Linear(hidden, intermediate)
        self.intermediate_act_fn = nn.GELU()  # HF "gelu" is the exact erf form

    def forward(self, x: Tensor) -> Tensor:
        return self.intermediate_act_fn(self.dense(x))


class BertLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, intermediate: int):
        super().__init__()
        self.attention = BertAttention(hidden, heads)
        self.intermediate = BertIntermediate(hidden, intermediate)
        self.output = BertSelfOutput(intermediate, hidden)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        a = self.attention(x, mask)
        return self.output(self.intermediate(a), a)


class BertEncoder(nn.Module):
    def __init__(self, layers: int, hidden: int, heads: int, intermediate: int):
        super().__init__()
        self.layer = nn.ModuleList([BertLayer(hidden, heads, intermediate) for _ in range(layers)])

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        for layer in self.layer:
            x = layer(x, mask)
        return x


class BertPooler(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)
        self.activation = nn.Tanh()

    def forward(self, x: Tensor) -> Tensor:
        b, _, h = x.shape
        cls = ops.slice(x, [0], [1], axes=[1], name=self._op_name("first_token"))
        cls = ops.reshape(cls, [b, h], name=self._op_name("first_token_2d"))  # [B, H]
        return self.activation(self.dense(cls))


class BertModel(nn.Module):
    def __init__(self, layers=12, hidden=768, heads=12, intermediate=3072, vocab=30522,
                 max_position=512, type_vocab=2):
        super().__init__()
        self.embeddings = BertEmbeddings(vocab, hidden, max_position, type_vocab)
        self.encoder = BertEncoder(layers, hidden, heads, intermediate)
        self.pooler = BertPooler(hidden)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor, attention_mask: Tensor):
        mask = additive_mask(attention_mask)
        h = self.encoder(self.embeddings(input_ids, token_type_ids), mask)
        return h, self.pooler(h)


def create(batch: DimArg = 1, seq: DimArg = 128, layers: int = 12, hidden: int = 768, heads: int = 12,
           intermediate: int = 3072, vocab: int = 30522, max_position: int = 512, type_vocab: int = 2):
    check_seq(seq, max_position)
    module = BertModel(layers, hidden, heads, intermediate, vocab, max_position, type_vocab)
    inputs = {name: token_input(batch, seq, name) for name in ("input_ids", "token_type_ids", "attention_mask")}
    return module, inputs


def forward(module: BertModel, inputs: dict[str, Tensor]) -> dict[str, Tensor]:
    h, pooled = module(inputs["input_ids"], inputs["token_type_ids"], inputs["attention_mask"])
    return {"last_hidden_state": h, "pooler_output": pooled}
