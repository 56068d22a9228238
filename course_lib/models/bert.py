"""A compact BERT encoder with a masked-LM head (lesson 07_bert_lamb).

Devlin et al. 2018, "BERT: Pre-training of Deep Bidirectional Transformers": token +
position (+ optional segment) embeddings, LayerNorm, N transformer blocks, and an MLM
head whose decoder shares its weights with the token embeddings. Attention goes through
``torch.nn.functional.scaled_dot_product_attention`` (flash / memory-efficient kernels on
GPUs, a fused CPU kernel otherwise).

Two block layouts (``BertConfig.norm``):

- ``"post"`` — original BERT: ``x = LN(x + Attn(x)); x = LN(x + MLP(x))``;
- ``"pre"``  — ``x = x + Attn(LN(x)); x = x + MLP(LN(x))`` with a final LN (GPT-2 and
  most later models): better-behaved gradients at the start, less warmup needed.

Sizes come from named presets (:data:`PRESETS`): ``tiny`` and ``mini`` train on a CPU,
``small`` wants a GPU, ``base`` is BERT-base (110M parameters).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

IGNORE_INDEX = -100


@dataclass(frozen=True)
class BertConfig:
    """The shape of one BERT. ``intermediate_size`` is the MLP width (4x hidden in BERT)."""

    vocab_size: int = 8192
    hidden_size: int = 256
    num_layers: int = 4
    num_heads: int = 4
    intermediate_size: int = 1024
    max_position: int = 512
    type_vocab_size: int = 0  # 2 in BERT (sentence A/B); 0 = no segment embeddings
    dropout: float = 0.1
    attention_dropout: float = 0.1
    norm: str = "post"  # "post" (original BERT) | "pre"
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02

    def __post_init__(self):
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size={self.hidden_size} is not divisible by num_heads={self.num_heads}")
        if self.norm not in ("post", "pre"):
            raise ValueError(f"norm={self.norm!r}; choose 'post' (original BERT) or 'pre'")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


# Named sizes: (layers, hidden, heads, MLP). tiny/mini/small follow Turc et al. 2019's
# compact BERTs; base is BERT-base.
PRESETS = {
    "tiny": dict(num_layers=2, hidden_size=128, num_heads=2, intermediate_size=512),
    "mini": dict(num_layers=4, hidden_size=256, num_heads=4, intermediate_size=1024),
    "small": dict(num_layers=4, hidden_size=512, num_heads=8, intermediate_size=2048),
    "base": dict(num_layers=12, hidden_size=768, num_heads=12, intermediate_size=3072),
}


def bert_config(preset: str = "mini", **overrides) -> BertConfig:
    """``BertConfig`` for a named preset, with any field overridden: ``bert_config("base", vocab_size=30522)``."""
    if preset not in PRESETS:
        raise ValueError(f"unknown BERT preset {preset!r}; choose one of {tuple(PRESETS)}")
    return BertConfig(**{**PRESETS[preset], **overrides})


class SelfAttention(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.num_heads = cfg.num_heads
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size)
        self.out = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.attention_dropout = cfg.attention_dropout
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=-1)  # each (B, T, C)
        q, k, v = (t.view(B, T, self.num_heads, C // self.num_heads).transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask,
                                           dropout_p=self.attention_dropout if self.training else 0.0)
        y = y.transpose(1, 2).reshape(B, T, C)  # (B, T, C)
        return self.dropout(self.out(y))


class MLP(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.fc = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.proj(F.gelu(self.fc(x))))


class Block(nn.Module):
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.pre = cfg.norm == "pre"
        self.attn = SelfAttention(cfg)
        self.ln1 = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.mlp = MLP(cfg)
        self.ln2 = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        if self.pre:
            x = x + self.attn(self.ln1(x), attn_mask)
            return x + self.mlp(self.ln2(x))
        x = self.ln1(x + self.attn(x, attn_mask))
        return self.ln2(x + self.mlp(x))


class MLMHead(nn.Module):
    """dense + GELU + LayerNorm, then a decoder tied to the token embeddings (plus its own bias)."""

    def __init__(self, cfg: BertConfig, token_embedding: nn.Embedding):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.ln = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.decoder = nn.Linear(cfg.hidden_size, cfg.vocab_size)
        self.decoder.weight = token_embedding.weight  # tied: (V, C), one tensor
        self.decoder.bias = nn.Parameter(torch.zeros(cfg.vocab_size))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.ln(F.gelu(self.dense(h))))  # (..., V)


class BertForMLM(nn.Module):
    """BERT encoder + MLM head. ``forward(input_ids, labels=None)``:

    - without labels: logits ``(B, T, V)``;
    - with labels (-100 = not scored): the mean cross-entropy over the scored positions,
      computing the head only there (15% of the tokens: the vocabulary projection is the
      single largest matrix multiply of a small BERT).
    """

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.pos_emb = nn.Embedding(cfg.max_position, cfg.hidden_size)
        self.seg_emb = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size) if cfg.type_vocab_size else None
        self.emb_ln = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.emb_dropout = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.num_layers))
        self.final_ln = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps) if cfg.norm == "pre" else None
        self.head = MLMHead(cfg, self.tok_emb)
        self.apply(self._init_weights)

    def _init_weights(self, module: nn.Module) -> None:
        # BERT's init: every weight N(0, 0.02), biases 0, LayerNorm (1, 0).
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=self.cfg.initializer_range)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def num_parameters(self, embeddings: bool = True) -> int:
        n = sum(p.numel() for p in self.parameters())  # tied weights counted once
        if not embeddings:
            n -= self.tok_emb.weight.numel() + self.pos_emb.weight.numel()
        return n

    def embed(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The blocks' input ``(B, T, C)``: token + position (+ segment) embeddings, LayerNorm, dropout.
        (A pipeline's first stage runs this and its blocks: lesson 10.)"""
        B, T = input_ids.shape
        if T > self.cfg.max_position:
            raise ValueError(f"sequence length {T} exceeds max_position={self.cfg.max_position}")
        pos = torch.arange(T, device=input_ids.device)
        x = self.tok_emb(input_ids) + self.pos_emb(pos)  # (B, T, C)
        if self.seg_emb is not None:
            seg = token_type_ids if token_type_ids is not None else torch.zeros_like(input_ids)
            x = x + self.seg_emb(seg)
        return self.emb_dropout(self.emb_ln(x))

    def encode(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
               attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Hidden states ``(B, T, C)``. ``attention_mask`` ``(B, T)``: True/1 for real tokens
        (packed data needs none)."""
        x = self.embed(input_ids, token_type_ids)
        attn_mask = None
        if attention_mask is not None:
            attn_mask = attention_mask.bool()[:, None, None, :]  # (B, 1, 1, T): keys that may be attended
        for block in self.blocks:
            x = block(x, attn_mask)
        if self.final_ln is not None:
            x = self.final_ln(x)
        return x

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None):
        h = self.encode(input_ids, token_type_ids, attention_mask)  # (B, T, C)
        if labels is None:
            return self.head(h)  # (B, T, V)
        # Score only the labelled positions, their count rounded up to a multiple of 64 with
        # ignored padding: a shape that changed every batch would make oneDNN (CPU) and
        # cuBLAS pick new kernels every step (measured: 20x slower bf16 steps on CPU).
        flat_labels = labels.reshape(-1)
        idx = (flat_labels != IGNORE_INDEX).nonzero().squeeze(1)  # (M,)
        n = idx.numel()
        padded = max(64, -(-n // 64) * 64)
        idx = F.pad(idx, (0, padded - n))  # the padding points at position 0 ...
        target = F.pad(flat_labels[idx[:n]], (0, padded - n), value=IGNORE_INDEX)  # ... and is not scored
        logits = self.head(h.reshape(-1, h.shape[-1])[idx])  # (M_padded, V)
        return F.cross_entropy(logits.float(), target, ignore_index=IGNORE_INDEX)


def build_bert(preset: str = "mini", vocab_size: int = 8192, **overrides) -> BertForMLM:
    """``BertForMLM(bert_config(preset, vocab_size=..., **overrides))``."""
    return BertForMLM(bert_config(preset, vocab_size=vocab_size, **overrides))
