"""LARS: layer-wise adaptive rate scaling (lesson 04_lars).

SGD uses one lr for every layer, but at large batch the ratio ||grad|| / ||weight||
differs by orders of magnitude between layers, so an lr that is safe for one layer
makes another diverge. LARS (You, Gitman, Ginsburg 2017, "Large Batch Training of
Convolutional Networks", arXiv:1708.03888) rescales each layer's gradient by a
*trust ratio* ``trust_coefficient * ||w|| / ||g||`` so that every layer moves by about
the same fraction of its own norm per step.

The semantics here are the ones in use today (NVIDIA apex ``LARC``, timm ``Lars``),
not the paper's pseudo-code: the trust ratio multiplies the gradient *before* the
momentum buffer, weight decay enters the denominator, zero norms fall back to a
ratio of 1, and parameters in a group with ``weight_decay=0`` are not adapted at all
(that is how biases and normalization parameters are excluded; see ``param_groups``).
"""

from __future__ import annotations

import torch
from torch import nn


def _l2_norm(x: torch.Tensor) -> torch.Tensor:
    # fp16/bf16 norms are taken in fp32: a sum of squares overflows fp16 at about 256.
    if x.dtype in (torch.float16, torch.bfloat16):
        return torch.linalg.vector_norm(x, dtype=torch.float32)
    return torch.linalg.vector_norm(x)


def lars_trust_ratio(
    w_norm,
    g_norm,
    *,
    trust_coefficient: float,
    weight_decay: float,
    eps: float,
    lr: float | None = None,
    trust_clip: bool = False,
):
    """LARS trust ratio ``trust_coefficient * ||w|| / (||g|| + weight_decay * ||w|| + eps)`` (lesson 04_lars).

    ``w_norm`` and ``g_norm`` are tensors or floats; floats in give a float out.
    The ratio is 1 when either norm is 0: a zero-initialized weight would otherwise get
    a ratio of 0 and never move, and a zero gradient a 0/0. With ``trust_clip`` (apex
    LARC's "clip" mode) the result is ``min(ratio / lr, 1)``: the layer's own lr
    ``ratio`` is used in place of the global ``lr`` when it is smaller, never above it.
    """
    if trust_clip and lr is None:
        raise ValueError("trust_clip=True needs the group's lr (the clip is min(ratio / lr, 1))")
    as_float = not (torch.is_tensor(w_norm) or torch.is_tensor(g_norm))
    dtype = torch.float64 if as_float else None
    w_norm = torch.as_tensor(w_norm, dtype=dtype)
    g_norm = torch.as_tensor(g_norm, dtype=dtype, device=w_norm.device)

    ratio = trust_coefficient * w_norm / (g_norm + weight_decay * w_norm + eps)
    one = torch.ones_like(ratio)
    # torch.where, not `if`: no device sync per parameter on a GPU.
    ratio = torch.where((w_norm > 0) & (g_norm > 0), ratio, one)
    if trust_clip:
        # lr == 0 (the first step of a warmup from 0) gives inf here, clipped to 1.
        ratio = torch.minimum(ratio / lr, one)
    return ratio.item() if as_float else ratio


class LARS(torch.optim.Optimizer):
    """SGD with momentum and the LARS layer-wise trust ratio (lesson 04_lars).

    You, Gitman, Ginsburg 2017, "Large Batch Training of Convolutional Networks"
    (arXiv:1708.03888), with the semantics in use today (NVIDIA apex ``LARC``, timm
    ``Lars``). For each parameter ``w`` with gradient ``g``:

    1. if its group has ``weight_decay != 0`` (or ``always_adapt=True``):
       ``trust_ratio = lars_trust_ratio(||w||, ||g||, ...)`` and
       ``g <- (g + weight_decay * w) * trust_ratio``;
    2. PyTorch's SGD momentum: ``buf <- momentum * buf + g`` (``buf = g`` on the first
       step); the update is ``buf``, or ``g + momentum * buf`` with ``nesterov``;
    3. ``w <- w - lr * update``.

    Groups with ``weight_decay=0`` and ``always_adapt=False`` get plain SGD with
    momentum: build the groups with ``param_groups(model, weight_decay)`` to keep biases
    and normalization parameters there. ``p.grad`` is left untouched.

    After each step ``optimizer.state[p]["trust_ratio"]`` holds the ratio just used
    (a 0-dim float32 tensor; 1 for parameters that are not adapted), for plotting the
    per-layer trust ratios over training.

    With mixed precision, unscale the gradients before ``step`` (``scaler.unscale_(opt)``,
    or ``scaler.step(opt)``, which unscales first): a trust ratio computed on
    loss-scaled gradients is off by the loss scale (apex issue #1030).
    """

    def __init__(
        self,
        params,
        lr: float,
        momentum: float = 0.9,
        weight_decay: float = 0.0,
        trust_coefficient: float = 0.001,
        eps: float = 1e-8,
        nesterov: bool = False,
        trust_clip: bool = False,
        always_adapt: bool = False,
    ):
        if not lr >= 0.0:
            raise ValueError(f"lr must be >= 0, got {lr!r}")
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {momentum!r}")
        if not weight_decay >= 0.0:
            raise ValueError(f"weight_decay must be >= 0, got {weight_decay!r}")
        if not trust_coefficient > 0.0:
            raise ValueError(f"trust_coefficient must be > 0, got {trust_coefficient!r}")
        if not eps >= 0.0:
            raise ValueError(f"eps must be >= 0, got {eps!r}")
        if nesterov and momentum == 0.0:
            raise ValueError("nesterov=True needs momentum > 0")
        defaults = dict(
            lr=lr,
            momentum=momentum,
            weight_decay=weight_decay,
            trust_coefficient=trust_coefficient,
            eps=eps,
            nesterov=nesterov,
            trust_clip=trust_clip,
            always_adapt=always_adapt,
        )
        super().__init__(params, defaults)
        # Per-group overrides (e.g. from param_groups) get the same checks.
        for group in self.param_groups:
            if not group["weight_decay"] >= 0.0:
                raise ValueError(f"weight_decay must be >= 0, got {group['weight_decay']!r} in a param group")
            if not 0.0 <= group["momentum"] < 1.0:
                raise ValueError(f"momentum must be in [0, 1), got {group['momentum']!r} in a param group")
            if group["nesterov"] and group["momentum"] == 0.0:
                raise ValueError("nesterov=True needs momentum > 0 (in a param group)")

    @torch.no_grad()
    def step(self, closure=None):
        """One LARS update of every parameter that has a gradient; returns the closure's loss."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()

        for group in self.param_groups:
            lr = group["lr"]
            momentum = group["momentum"]
            weight_decay = group["weight_decay"]
            adapt = weight_decay != 0 or group["always_adapt"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("LARS does not support sparse gradients")
                grad = p.grad
                state = self.state[p]

                if adapt:
                    trust_ratio = lars_trust_ratio(
                        _l2_norm(p),
                        _l2_norm(grad),
                        trust_coefficient=group["trust_coefficient"],
                        weight_decay=weight_decay,
                        eps=group["eps"],
                        lr=lr,
                        trust_clip=group["trust_clip"],
                    )
                    # Out of place: p.grad stays the gradient the user computed.
                    update = grad.add(p, alpha=weight_decay).mul_(trust_ratio)
                else:
                    trust_ratio = torch.ones((), device=p.device)
                    update = grad
                state["trust_ratio"] = trust_ratio.detach().float()

                if momentum != 0:
                    buf = state.get("momentum_buffer")
                    if buf is None:
                        buf = state["momentum_buffer"] = update.detach().clone()
                    else:
                        buf.mul_(momentum).add_(update)
                    update = update.add(buf, alpha=momentum) if group["nesterov"] else buf

                p.add_(update, alpha=-lr)
        return loss


# Modules whose parameters are normalization scales and shifts. _NormBase covers
# BatchNorm1d/2d/3d, SyncBatchNorm and InstanceNorm*.
_NORM_TYPES = tuple(
    t
    for t in (
        nn.modules.batchnorm._NormBase,
        nn.LayerNorm,
        nn.GroupNorm,
        getattr(nn, "RMSNorm", None),
    )
    if t is not None
)


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two optimizer groups: weights with ``weight_decay``, biases and norm parameters with 0 (lesson 04_lars).

    A group with ``weight_decay=0`` is also how LARS and LAMB exclude parameters from
    the trust ratio. Biases and normalization parameters must be excluded: a bias
    initialized to zero has ``||w|| = 0``, so its trust ratio is 0 and it never moves
    (the bug in ``lars.py`` of github.com/swethmandava/scaleDL_ghc19, the NCF notebook by the seed
    talk's speaker: it adapts every parameter); with a zero-norm guard it moves once and then gets
    a ratio of about ``trust_coefficient * lr``, which is frozen all the same. Decaying
    them toward 0 does not help generalization either (Goyal et al. 2017 and the
    LAMB/BERT recipe exclude them too).

    No decay: every 1-D (or 0-D) parameter, and every parameter of a LayerNorm,
    BatchNorm*, GroupNorm (also InstanceNorm*, RMSNorm) module. Everything else,
    embeddings included, is decayed. Frozen parameters (``requires_grad=False``) are
    left out; a parameter shared between modules appears once. Returns
    ``[{"params": decayed, "weight_decay": weight_decay}, {"params": not_decayed, "weight_decay": 0.0}]``,
    dropping a group that would be empty.
    """
    if not weight_decay >= 0.0:
        raise ValueError(f"weight_decay must be >= 0, got {weight_decay!r}")
    decay, no_decay = [], []
    seen = set()
    for module in model.modules():
        is_norm = isinstance(module, _NORM_TYPES)
        for p in module.parameters(recurse=False):
            if id(p) in seen or not p.requires_grad:
                continue
            seen.add(id(p))
            (no_decay if is_norm or p.ndim <= 1 else decay).append(p)
    groups = [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return [g for g in groups if g["params"]]
