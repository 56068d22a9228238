"""What lesson 05 measures about mixed precision: gradients on fp16's number line, throughput per precision.

The autocast and loss-scaling machinery itself is :class:`course_lib.precision.Precision`,
used by the training engine.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from .hardware import default_device
from .precision import fp16_fates
from .tables import Table
from .train.ncf import make_batches, train_to_target


def gradient_log2_magnitudes(model: torch.nn.Module, data, cfg, *, batches: int = 4, seed: int = 1) -> dict:
    """log2 |g| of every nonzero fp32 gradient element of ``model`` over a few training batches (lesson 05).

    Returns ``{"log2": 1-D numpy array, "zero_in_fp16": fraction of the nonzero gradients that
    become 0 when cast to fp16, "zero_in_fp16_scaled": {scale: fraction}}``; the scales are
    2^8, 2^16 (GradScaler's start) and 2^24, and a scaled value counts as lost when
    ``(g * scale).half()`` is 0 (underflow), or as overflow when it is inf.
    """
    was_training = model.training
    model.train()
    device = next(model.parameters()).device
    it = iter(make_batches(data.to(device), cfg.replace(seed=seed)))
    chunks = []
    for _ in range(batches):
        users, items, labels = next(it)
        model.zero_grad(set_to_none=True)
        F.binary_cross_entropy_with_logits(model(users, items), labels).backward()
        chunks += [p.grad.detach().flatten().float() for p in model.parameters() if p.grad is not None]
    model.zero_grad(set_to_none=True)
    model.train(was_training)
    g = torch.cat(chunks).abs()
    g = g[g > 0]
    out = {"log2": torch.log2(g).cpu().numpy(), "count": int(g.numel()), "zero_in_fp16": fp16_fates(g)["zero"]}
    out["zero_in_fp16_scaled"] = {}
    out["overflow_in_fp16_scaled"] = {}
    for scale in (2.0 ** 8, 2.0 ** 16, 2.0 ** 24):
        fates = fp16_fates(g * scale)
        out["zero_in_fp16_scaled"][scale] = fates["zero"]
        out["overflow_in_fp16_scaled"][scale] = fates["inf"]
    out["log2_scaled"] = (out["log2"] + 16.0).astype(np.float64)  # the same values times 2^16
    return out


def fp16_underflow_table(mags: dict) -> Table:
    """What fraction of the (nonzero) gradient elements fp16 loses, without and with loss scaling."""
    t = Table(["loss scale", "lost to underflow (become 0)", "overflow (inf)"],
              title=f"{mags['count']:,} nonzero gradient elements cast to fp16")
    t.add(**{"loss scale": "1 (no scaling)", "lost to underflow (become 0)": f"{mags['zero_in_fp16']:.1%}",
             "overflow (inf)": "0.0%"})
    for s, z in mags["zero_in_fp16_scaled"].items():
        t.add(**{"loss scale": f"2^{int(math.log2(s))}", "lost to underflow (become 0)": f"{z:.1%}",
                 "overflow (inf)": f"{mags['overflow_in_fp16_scaled'][s]:.1%}"})
    return t


def precision_throughput(data, cfg, modes=("fp32", "bf16", "fp16"), *, steps: int = 30, device=None) -> dict:
    """Training samples/s of ``cfg`` in each precision over ``steps`` steps, no evaluation (lesson 05).

    Returns ``{mode: TrainResult}``. Each mode first runs 3 untimed steps: the first use of a
    kernel (loading, autotuning, the allocator growing, autocast's caches) is not its speed.
    """
    device = torch.device(device) if device is not None else default_device()
    data = data.to(device)  # once: each run below would otherwise copy the dataset again
    out = {}
    for m in modes:
        run = cfg.replace(precision=m, max_epochs=10.0, stop_at_target=False)
        train_to_target(data, run.replace(max_steps=3), device=device, progress="none", evaluate_points=False)
        out[m] = train_to_target(data, run.replace(max_steps=steps), device=device, progress="none",
                                 evaluate_points=False)
    return out
