"""Interactive widgets: try a setting yourself and watch the curve (lesson 03).

Under papermill, CI or a script (no widget frontend) every widget call runs once with its
defaults and returns a static figure, so the lessons stay executable everywhere.
"""

from __future__ import annotations

import math

import ipywidgets as w
import matplotlib.pyplot as plt
from IPython.display import display

from .plots import plot_curve
from .progress import resolve_progress
from .train.ncf import train_to_target


def widgets_available() -> bool:
    """True in a notebook a person drives (ipywidgets can render); False under papermill/CI/scripts."""
    if resolve_progress("auto") != "bar":  # CI, $COURSE_PROFILE, scripts: no widget frontend
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
    batch_size = batch_size or base_cfg.global_batch_size
    lr = lr or base_cfg.peak_lr

    def run(b, lr_, warm, ax=None):
        # the slider's lr is the peak lr itself (no scaling rule), at the chosen batch
        cfg = base_cfg.replace(global_batch_size=int(b), base_lr=float(lr_), base_batch_size=None, lr_scaling="none",
                               warmup_steps=int(warm), target_hr=target_hr, max_epochs=float(max_epochs),
                               stop_at_target=False)
        r = train_to_target(data, cfg, device=device, progress="none")
        fig = plot_curve(r.curve, target_hr=target_hr, ax=ax, x="epoch",
                         label=f"batch {cfg.global_batch_size}, lr {cfg.peak_lr:.3g}, warmup {cfg.warmup_steps}")
        return fig, r

    if interactive is None:
        interactive = widgets_available()
    if not interactive:
        return run(batch_size, lr, warmup_steps)


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
