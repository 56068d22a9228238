"""NeuMF: Neural Matrix Factorization (He et al., 2017, "Neural Collaborative Filtering").

Two branches over separate embeddings, fused by one output layer:

* GMF: ``p_u * q_i`` (element-wise), a generalized matrix factorization;
* MLP: ``[p'_u, q'_i]`` through ReLU layers ``layers[0] -> ... -> layers[-1]``;
* output: ``h^T [gmf, mlp]`` -> one logit per (user, item); train with BCE-with-logits.

Initialization as in NVIDIA's DeepLearningExamples NCF: embeddings ~ N(0, 0.01),
MLP layers Glorot-uniform, the output layer LeCun-uniform (fan-in), biases zero.

``sparse=True`` (lesson 01) makes the four embedding tables return *sparse* gradients
(``nn.Embedding(sparse=True)``): only the rows a batch looked up, instead of a dense table of
mostly zeros, for an optimizer that updates those rows only (``torch.optim.SparseAdam``). The
weights, their initialization and the forward pass are the same either way.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import nn


class NeuMF(nn.Module):
    def __init__(self, num_users: int, num_items: int, *, factors: int = 64,
                 layers: Sequence[int] = (256, 256, 128, 64), dropout: float = 0.0, sparse: bool = False):
        super().__init__()
        if layers[0] % 2:
            raise ValueError(f"layers[0]={layers[0]} must be even: it is user and item MLP embeddings concatenated")
        self.gmf_user = nn.Embedding(num_users, factors, sparse=sparse)
        self.gmf_item = nn.Embedding(num_items, factors, sparse=sparse)
        self.mlp_user = nn.Embedding(num_users, layers[0] // 2, sparse=sparse)
        self.mlp_item = nn.Embedding(num_items, layers[0] // 2, sparse=sparse)
        mlp = []
        for d_in, d_out in zip(layers[:-1], layers[1:]):
            mlp += [nn.Linear(d_in, d_out), nn.ReLU()]
            if dropout:
                mlp.append(nn.Dropout(dropout))
        self.mlp = nn.Sequential(*mlp)
        self.out = nn.Linear(factors + layers[-1], 1)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for emb in (self.gmf_user, self.gmf_item, self.mlp_user, self.mlp_item):
            nn.init.normal_(emb.weight, std=0.01)
        for m in self.mlp:
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)
        bound = math.sqrt(3.0 / self.out.in_features)  # LeCun uniform
        nn.init.uniform_(self.out.weight, -bound, bound)
        nn.init.zeros_(self.out.bias)

    def forward(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        """(B,), (B,) -> (B,) logits."""
        gmf = self.gmf_user(users) * self.gmf_item(items)  # (B, factors)
        mlp = self.mlp(torch.cat([self.mlp_user(users), self.mlp_item(items)], dim=-1))  # (B, layers[-1])
        return self.out(torch.cat([gmf, mlp], dim=-1)).squeeze(-1)  # (B,)

    def score(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        """(n,), (n, C) -> (n, C): the logit of each user against each of its C candidate items.

        The numbers of ``forward`` on every (user, item) pair, up to float rounding, at about half
        its cost: evaluation ranks 101 candidates per user (lesson 01), so it scores each user 101
        times. Two things are done once per user or per item instead of once per pair: the first
        MLP layer is linear in ``[p'_u, q'_i]``, so ``W [p'_u; q'_i] + b = (W_u p'_u + b) + W_i q'_i``;
        and the output layer's GMF part is ``(h_g * p_u) . q_i``. The item side is computed for
        every item when there are fewer items than pairs (always, in evaluation), else per pair.
        """
        first = self.mlp[0]
        half = self.mlp_user.embedding_dim
        w_user, w_item = first.weight[:, :half], first.weight[:, half:]
        x = (self.mlp_user(users) @ w_user.T + first.bias)[:, None, :]  # (n, 1, H)
        if self.mlp_item.num_embeddings <= items.numel():
            x = x + (self.mlp_item.weight @ w_item.T)[items]  # (n, C, H) from an (I, H) table
        else:
            x = x + self.mlp_item(items) @ w_item.T
        mlp = self.mlp[2:](self.mlp[1](x))  # the first Linear is done above: its ReLU, then the rest
        factors = self.gmf_user.embedding_dim
        w_out = self.out.weight[0]
        gmf = (self.gmf_item(items) @ (self.gmf_user(users) * w_out[:factors])[:, :, None]).squeeze(-1)  # (n, C)
        return gmf + mlp @ w_out[factors:] + self.out.bias
