"""LAMB: layer-wise adaptive moments for batch training (lesson 07_bert_lamb).

LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning: Training BERT in
76 minutes", arXiv:1904.00962) is to Adam what LARS is to SGD: each layer's Adam
update is rescaled by a trust ratio ``||w|| / ||update||``, so every layer moves by
about ``lr`` times its own norm, whatever the scale of its gradients.

The semantics are those of the LAMB in NVIDIA's BERT recipe (apex ``FusedLAMB``, the
"NVLAMB" of NVIDIA's BERT pretraining blog post):

- global gradient pre-normalization, which the paper's algorithm does not have: before the
  moments, all gradients (of all groups) are divided by ``max(1, ||g||_global / max_grad_norm)``,
  so one huge batch gradient cannot blow up the moments;
- Adam's bias correction of ``m`` and ``v``, as in the paper's algorithm. The seed talk: "the
  lamb paper does use bias correction", and mentions that it converged without it, which
  NVIDIA did not see: without bias correction their runs diverged (lesson 07's ablation).
"""

from __future__ import annotations

import math

import torch


def _l2_norm(x: torch.Tensor) -> torch.Tensor:
    # fp16/bf16 norms are taken in fp32: a sum of squares overflows fp16 at about 256.
    if x.dtype in (torch.float16, torch.bfloat16):
        return torch.linalg.vector_norm(x, dtype=torch.float32)
    return torch.linalg.vector_norm(x)


def lamb_trust_ratio(w_norm, u_norm, trust_clip: bool = False):
    """LAMB trust ratio ``||w|| / ||update||``; 1 when a norm is 0; at most 1 with ``trust_clip`` (lesson 07_bert_lamb).

    ``w_norm`` and ``u_norm`` are tensors or floats; floats in give a float out.
    """
    as_float = not (torch.is_tensor(w_norm) or torch.is_tensor(u_norm))
    dtype = torch.float64 if as_float else None
    w_norm = torch.as_tensor(w_norm, dtype=dtype)
    u_norm = torch.as_tensor(u_norm, dtype=dtype, device=w_norm.device)

    ratio = w_norm / u_norm
    one = torch.ones_like(ratio)
    # A zero-initialized weight would get 0 and never move; a zero update would give 0/0.
    ratio = torch.where((w_norm > 0) & (u_norm > 0), ratio, one)
    if trust_clip:
        # timm's option: never step further than plain Adam(W) would.
        ratio = torch.minimum(ratio, one)
    return ratio.item() if as_float else ratio


class LAMB(torch.optim.Optimizer):
    """Adam(W) with global gradient pre-normalization and a layer-wise trust ratio (lesson 07_bert_lamb).

    You et al. 2019, "Large Batch Optimization for Deep Learning: Training BERT in
    76 minutes" (arXiv:1904.00962), with NVIDIA's tweaks from their BERT recipe (apex
    ``FusedLAMB``). Each step:

    1. global pre-normalization: ``g <- g / max(1, ||g||_global / max_grad_norm)``,
       the norm taken over every gradient of every group (``max_grad_norm=None`` or 0
       turns it off);
    2. Adam moments at step ``t`` (counted per parameter):
       ``m <- b1 * m + (1 - b1) * g`` (``m <- b1 * m + g`` with ``grad_averaging=False``),
       ``v <- b2 * v + (1 - b2) * g**2``;
    3. ``update = (m / (1 - b1**t)) / (sqrt(v) / sqrt(1 - b2**t) + eps)`` with
       ``bias_correction``, else ``m / (sqrt(v) + eps)``; then
       ``update += weight_decay * w`` (decoupled weight decay, as in AdamW);
    4. if the group has ``weight_decay != 0`` (or ``always_adapt=True``, apex's
       ``use_nvlamb``): ``trust_ratio = lamb_trust_ratio(||w||, ||update||, trust_clip)``,
       else 1;
    5. ``w <- w - lr * trust_ratio * update``.

    Build the groups with ``param_groups(model, weight_decay)`` so that biases and
    normalization parameters are neither decayed nor adapted. ``max_grad_norm`` is one
    setting for the whole optimizer (the norm is global). ``p.grad`` is left untouched.
    After each step ``optimizer.state[p]["trust_ratio"]`` holds the ratio just used (a
    0-dim float32 tensor). With mixed precision, unscale the gradients before ``step``.
    For fp16/bf16 parameters the moments are kept, and the update computed, in fp32.
    """

    def __init__(
        self,
        params,
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.01,
        bias_correction: bool = True,
        grad_averaging: bool = True,
        max_grad_norm: float | None = 1.0,
        trust_clip: bool = False,
        always_adapt: bool = False,
    ):
        if not lr >= 0.0:
            raise ValueError(f"lr must be >= 0, got {lr!r}")
        if len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"betas must be two numbers in [0, 1), got {betas!r}")
        if not eps >= 0.0:
            raise ValueError(f"eps must be >= 0, got {eps!r}")
        if not weight_decay >= 0.0:
            raise ValueError(f"weight_decay must be >= 0, got {weight_decay!r}")
        if max_grad_norm is not None and not max_grad_norm >= 0.0:
            raise ValueError(
                f"max_grad_norm must be >= 0 or None (0 and None turn pre-normalization off), got {max_grad_norm!r}"
            )
        defaults = dict(
            lr=lr,
            betas=tuple(betas),
            eps=eps,
            weight_decay=weight_decay,
            bias_correction=bias_correction,
            grad_averaging=grad_averaging,
            max_grad_norm=max_grad_norm,
            trust_clip=trust_clip,
            always_adapt=always_adapt,
        )
        super().__init__(params, defaults)
        for group in self.param_groups:
            if not group["weight_decay"] >= 0.0:
                raise ValueError(f"weight_decay must be >= 0, got {group['weight_decay']!r} in a param group")
            if group["max_grad_norm"] != max_grad_norm:
                raise ValueError(
                    "max_grad_norm is one setting for the whole optimizer (the gradient norm is global); "
                    f"a param group has {group['max_grad_norm']!r}, the optimizer {max_grad_norm!r}"
                )

    @staticmethod
    def adapts(group: dict) -> bool:
        """Whether a param group's steps are scaled by trust ratios (decayed, or ``always_adapt``)."""
        return group["weight_decay"] != 0 or group["always_adapt"]

    @torch.no_grad()
    def _global_clip_divisor(self) -> torch.Tensor | None:
        """``max(1, ||g||_global / max_grad_norm)`` over every gradient, or None when off."""
        max_grad_norm = self.param_groups[0]["max_grad_norm"]
        if not max_grad_norm:
            return None
        grads = [p.grad for group in self.param_groups for p in group["params"] if p.grad is not None]
        if not grads:
            return None
        device = grads[0].device
        global_norm = torch.linalg.vector_norm(torch.stack([_l2_norm(g).to(device) for g in grads]))
        return torch.clamp(global_norm / max_grad_norm, min=1.0)

    @staticmethod
    def _adam_update(group, state, w, grad):
        """Advance the moments m and v by one step and return Adam's update (plus weight decay) for w."""
        beta1, beta2 = group["betas"]
        # grad_averaging=False is the m <- b1*m + g of apex (BERT's recipe keeps it on).
        beta3 = 1.0 - beta1 if group["grad_averaging"] else 1.0
        eps = group["eps"]
        if not state:
            state["step"] = 0
            state["exp_avg"] = torch.zeros_like(w, memory_format=torch.preserve_format)  # m
            state["exp_avg_sq"] = torch.zeros_like(w, memory_format=torch.preserve_format)  # v
        state["step"] += 1
        t = state["step"]
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        exp_avg.mul_(beta1).add_(grad, alpha=beta3)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)

        if group["bias_correction"]:
            # m and v start at 0, so early on they underestimate E[g] and E[g^2].
            bias_correction1 = 1.0 - beta1**t
            bias_correction2 = 1.0 - beta2**t
            denom = (exp_avg_sq.sqrt() / math.sqrt(bias_correction2)).add_(eps)
            update = (exp_avg / bias_correction1).div_(denom)
        else:
            update = exp_avg / exp_avg_sq.sqrt().add_(eps)
        if group["weight_decay"] != 0:
            update.add_(w, alpha=group["weight_decay"])
        return update

    @torch.no_grad()
    def step(self, closure=None):
        """One LAMB update of every parameter that has a gradient; returns the closure's loss."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()

        clip_divisor = self._global_clip_divisor()
        for group in self.param_groups:
            lr = group["lr"]
            adapt = self.adapts(group)
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("LAMB does not support sparse gradients")
                grad = p.grad if clip_divisor is None else p.grad / clip_divisor.to(p.grad.device)
                # fp16/bf16 parameters: the moments and the update in fp32. In fp16, v = (1 - b2) g^2
                # of a pre-normalized gradient (g ~ 1e-3) is ~1e-9, below fp16's smallest subnormal:
                # v flushes to 0, the update becomes m / eps and every trust ratio collapses.
                low = p.dtype in (torch.float16, torch.bfloat16)
                w = p.float() if low else p
                if low:
                    grad = grad.float()

                update = self._adam_update(group, self.state[p], w, grad)

                if adapt:
                    trust_ratio = lamb_trust_ratio(_l2_norm(w), _l2_norm(update), trust_clip=group["trust_clip"])
                    update.mul_(trust_ratio)
                else:
                    trust_ratio = torch.ones((), device=p.device)
                self.state[p]["trust_ratio"] = trust_ratio.detach().float()

                p.add_(update.to(p.dtype), alpha=-lr)
        return loss
