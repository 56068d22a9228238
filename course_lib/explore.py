"""Batch-size sweeps, gradient magnitudes and an interactive explorer (lessons 02-05).

Every run goes through the one loop, :func:`course_lib.train.train_to_target`; this module
only builds its inputs (scaled configs), collects its outputs into tables, and draws.

- ``scaled_config`` / ``scaling_table``: what the linear and square-root rules give
  (pure arithmetic, the lessons' deterministic NBVAL cells);
- ``run_sweep`` / ``sweep_rows`` / ``sweep_table`` / ``fastest``: a sweep and its table;
- ``gradient_log2_magnitudes``: where a model's gradients sit on fp16's number line (lesson 05);
- ``explore``: batch size / lr / warmup sliders that retrain and redraw; under papermill or
  CI (no widget frontend) the same call runs once with its defaults and draws a static figure.
"""

from __future__ import annotations

import math

import torch

from .optim.schedules import linear_scaled_lr, sqrt_scaled_lr
from .tables import Table

RULES = {"linear": linear_scaled_lr, "sqrt": sqrt_scaled_lr}


def scaled_config(base_cfg, batch_size: int, rule: str = "linear", base_batch_size: int | None = None, **changes):
    """``base_cfg`` at ``batch_size`` with its lr scaled by ``rule`` ("linear" | "sqrt") (lesson 02)."""
    if rule not in RULES:
        raise ValueError(f"rule={rule!r}; choose one of {sorted(RULES)}")
    base = base_batch_size or base_cfg.batch_size
    return base_cfg.replace(batch_size=batch_size, lr=RULES[rule](base_cfg.lr, batch_size, base), **changes)


def scaling_table(base_lr: float, base_batch_size: int, batch_sizes) -> Table:
    """The lr each rule gives at each batch size (deterministic: a lesson's NBVAL_CHECK_OUTPUT cell)."""
    t = Table(["batch size", "k", "lr (linear: k x)", "lr (sqrt: sqrt(k) x)"],
              title=f"Scaled learning rates from lr {base_lr:g} at batch {base_batch_size}")
    for b in batch_sizes:
        t.add(**{"batch size": b, "k": b / base_batch_size,
                 "lr (linear: k x)": linear_scaled_lr(base_lr, b, base_batch_size),
                 "lr (sqrt: sqrt(k) x)": sqrt_scaled_lr(base_lr, b, base_batch_size)})
    return t


def run_sweep(data, cfgs, *, target_hr: float, max_epochs, device=None, labels=None, progress: str = "auto",
              **kwargs) -> list:
    """``train_to_target`` for each config (``max_epochs``: a number, or a function of the config)."""
    from .train import train_to_target

    results = []
    for i, cfg in enumerate(cfgs):
        epochs = max_epochs(cfg) if callable(max_epochs) else max_epochs
        label = labels[i] if labels else f"b{cfg.batch_size} {cfg.optimizer} lr {cfg.lr:.3g}"
        results.append(train_to_target(data, cfg, target_hr=target_hr, max_epochs=epochs, device=device,
                                       progress=progress, label=label, **kwargs))
    return results


def sweep_rows(results, labels=None) -> list[dict]:
    """One dict per run: the quantities the lessons tabulate and plot."""
    rows = []
    for i, r in enumerate(results):
        c = r.config
        rows.append({
            "rule": labels[i] if labels else "", "batch size": c["batch_size"], "optimizer": c["optimizer"],
            "lr": c["lr"], "warmup steps": c.get("warmup_steps", 0), "precision": r.precision.get("mode", c["precision"]),
            "time to target (s)": r.time_to_target_s, "steps to target": r.steps_to_target,
            "epochs to target": r.epochs_to_target, "final HR@10": r.final_hr, "best HR@10": r.best_hr,
            "train HR@10": r.final_train_hr, "epochs run": r.epochs, "samples/s": r.samples_per_s,
            "diverged": r.diverged,
        })
    return rows


def sweep_table(results, labels=None, *, title: str = "",
                columns=("rule", "batch size", "lr", "time to target (s)", "steps to target", "epochs to target",
                         "final HR@10", "epochs run", "samples/s")) -> Table:
    """The measured table of a sweep; "not reached" (never the run length) where the target was missed."""
    t = Table(list(columns), title=title)
    for row in sweep_rows(results, labels):
        if row["time to target (s)"] is None:
            row["time to target (s)"] = "diverged" if row["diverged"] else "not reached"
        t.add(**{c: row[c] for c in columns})
    return t


def fastest(results):
    """The run that reached its target in the least training time (None when none did)."""
    reached = [r for r in results if r.time_to_target_s is not None]
    return min(reached, key=lambda r: r.time_to_target_s) if reached else None


# --------------------------------------------------------------------------- lesson 05: gradients on fp16's number line


def gradient_log2_magnitudes(model: torch.nn.Module, data, cfg, *, batches: int = 4, seed: int = 1) -> dict:
    """log2 |g| of every nonzero fp32 gradient element of ``model`` over a few training batches (lesson 05).

    Returns ``{"log2": 1-D numpy array, "zero_in_fp16": fraction of the nonzero gradients that
    become 0 when cast to fp16, "zero_in_fp16_scaled": {scale: fraction}}``; the scales are
    2^8, 2^16 (GradScaler's start) and 2^24, and a scaled value counts as lost when
    ``(g * scale).half()`` is 0 (underflow), or as overflow when it is inf.
    """
    import numpy as np
    import torch.nn.functional as F

    from .train import make_batches

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
    out = {"log2": torch.log2(g).cpu().numpy(), "count": int(g.numel()),
           "zero_in_fp16": float((g.half() == 0).float().mean())}
    out["zero_in_fp16_scaled"] = {}
    out["overflow_in_fp16_scaled"] = {}
    for scale in (2.0 ** 8, 2.0 ** 16, 2.0 ** 24):
        h = (g * scale).half()
        out["zero_in_fp16_scaled"][scale] = float((h == 0).float().mean())
        out["overflow_in_fp16_scaled"][scale] = float(torch.isinf(h).float().mean())
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


# --------------------------------------------------------------------------- the interactive explorer


def widgets_available() -> bool:
    """True in a notebook a person drives (ipywidgets can render); False under papermill/CI/scripts."""
    from .progress import resolve_progress

    if resolve_progress("auto") != "bar":  # CI, $COURSE_PROFILE, scripts: no widget frontend
        return False
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return True


def explore(data, base_cfg, *, target_hr: float, max_epochs: float = 2.0, device=None,
            batch_sizes=(256, 1024, 4096, 16384, 65536), lr: float | None = None, batch_size: int | None = None,
            warmup_steps: int = 0, interactive: bool | None = None):
    """Try a batch size, lr and warmup yourself: a short ``train_to_target`` run, its HR@10 curve redrawn.

    In a notebook with a widget frontend this shows a batch dropdown, a log-scale lr slider,
    a warmup slider and a Run button. Otherwise (papermill, nbval, CI, ``interactive=False``)
    it runs once with the given values (default: the base batch and lr) and returns
    ``(figure, result)`` for a static figure.
    """
    from .plots import plot_curve
    from .train import train_to_target

    batch_size = batch_size or base_cfg.batch_size
    lr = lr or base_cfg.lr

    def run(b, lr_, warm, ax=None):
        cfg = base_cfg.replace(batch_size=int(b), lr=float(lr_), warmup_steps=int(warm))
        r = train_to_target(data, cfg, target_hr=target_hr, max_epochs=max_epochs, device=device,
                            progress="none", stop_at_target=False)
        fig = plot_curve(r.curve, target_hr=target_hr, ax=ax, x="epoch",
                         label=f"batch {cfg.batch_size}, lr {cfg.lr:.3g}, warmup {cfg.warmup_steps}")
        return fig, r

    if interactive is None:
        interactive = widgets_available()
    if not interactive:
        return run(batch_size, lr, warmup_steps)

    import ipywidgets as w
    import matplotlib.pyplot as plt
    from IPython.display import display

    b_w = w.Dropdown(options=list(batch_sizes), value=batch_size if batch_size in batch_sizes else batch_sizes[0],
                     description="batch")
    lr_w = w.FloatLogSlider(value=lr, base=10, min=math.log10(lr) - 2, max=math.log10(lr) + 2.5, step=0.1,
                            description="lr", readout_format=".2e")
    warm_w = w.IntSlider(value=warmup_steps, min=0, max=2000, step=50, description="warmup steps")
    button = w.Button(description="Run", button_style="primary")
    keep = w.Checkbox(value=False, description="keep earlier curves")
    out = w.Output()
    state = {"fig": None, "ax": None}

    def on_click(_):
        with out:
            if state["fig"] is None or not keep.value:
                state["fig"], state["ax"] = plt.subplots(figsize=(6, 3.5))
                plt.close(state["fig"])
            out.clear_output(wait=True)
            button.disabled = True
            try:
                _, r = run(b_w.value, lr_w.value, warm_w.value, ax=state["ax"])
                display(state["fig"])
                print(r.summary())
            finally:
                button.disabled = False

    button.on_click(on_click)
    display(w.VBox([w.HBox([b_w, lr_w]), w.HBox([warm_w, keep, button]), out]))
    return None, None


# --------------------------------------------------------------------------- the baseline, from lesson 01


def load_baseline(data, target_hr: float, directory=None):
    """Lesson 01's saved baseline run as a ``TrainResult`` when it was measured on the same data
    and target in this results directory; else None (the lesson then measures it itself)."""
    import dataclasses

    from .results import load_results
    from .train import TrainResult

    rec = load_results(directory).get("01_baseline")
    if not rec or rec.get("dataset") != data.name or rec.get("target_hr") != target_hr:
        return None
    names = {f.name for f in dataclasses.fields(TrainResult)}
    try:
        return TrainResult(**{k: v for k, v in rec.items() if k in names})
    except TypeError:  # an older record without some required field
        return None


def pick_degraded_batch(rows, candidates, rule: str = "linear") -> int:
    """The batch where ``rule`` broke or degraded most, from lesson 02's sweep rows (lesson 03).

    The smallest batch of ``rule`` that missed the target (diverged or not reached); if every
    run reached it, the one that needed the most epochs. Without rows, ``candidates[0]``.
    """
    mine = sorted((r for r in rows or () if r.get("rule") == rule and r["batch size"] in candidates),
                  key=lambda r: r["batch size"])
    if not mine:
        return candidates[0]
    missed = [r for r in mine if r.get("time to target (s)") is None]
    if missed:
        return missed[0]["batch size"]
    return max(mine, key=lambda r: r.get("epochs to target") or 0.0)["batch size"]


def config_from_ladder(base_cfg, directory=None, steps=None):
    """``(cfg, row)``: the training config of the fastest saved ladder row that reached its target
    (lesson 05 adds mixed precision on top of it); ``(base_cfg, None)`` when there is none."""
    import dataclasses

    from .results import ladder_rows

    rows = [r for r in ladder_rows(directory) if r.get("time_to_target_s") and r.get("config")
            and (steps is None or r["step"] in steps)]
    if not rows:
        return base_cfg, None
    row = min(rows, key=lambda r: r["time_to_target_s"])
    names = {f.name for f in dataclasses.fields(base_cfg)}
    cfg = base_cfg.replace(**{k: v for k, v in row["config"].items() if k in names and k != "eval_every"})
    return cfg, row


def precision_throughput(data, cfg, modes=("fp32", "bf16", "fp16"), *, steps: int = 30, device=None) -> dict:
    """Training samples/s of ``cfg`` in each precision over ``steps`` steps, no evaluation (lesson 05).

    Returns ``{mode: TrainResult}``; the first few steps (allocation, autocast caches) are
    included, so use enough steps that they do not dominate.
    """
    from .train import train_to_target

    return {m: train_to_target(data, cfg.replace(precision=m), max_steps=steps, max_epochs=10, device=device,
                               progress="none", evaluate_points=False, stop_at_target=False)
            for m in modes}
