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


def allreduce_explorer(p: int = 1024, n_bytes: float = 100 * 2**20, alpha: float = 5e-6, beta: float = 1 / 50e9,
                       gamma: float = 0.0, interactive: bool | None = None):
    """P, message size, alpha and beta -> each all-reduce algorithm's modelled time and the winner (lesson 08).

    With a widget frontend: sliders for log2 P, the message size, alpha and the link bandwidth,
    and a bar chart that follows them. Otherwise (papermill, CI) one static ``(figure, table)``
    for the given values.
    """
    from .collectives_study import ALLREDUCE_MODELS
    from .comm import cost
    from .tables import Table

    models = dict(ALLREDUCE_MODELS, rabenseifner=cost.rabenseifner_allreduce_time,
                  **{"flat tree": cost.flat_tree_allreduce_time})

    def draw(p_, n_, a_, b_, ax=None):
        times = {k: f(n_, p_, a_, b_, gamma) for k, f in models.items()}
        best = min(times, key=times.get)
        if ax is None:
            _, ax = plt.subplots(figsize=(6.5, 3))
        ax.barh(list(times), [v * 1e3 for v in times.values()],
                color=["tab:green" if k == best else "tab:gray" for k in times])
        ax.set_xscale("log")
        ax.set_xlabel("modelled all-reduce time (ms)")
        ax.set_title(f"p = {p_}, {cost._human_bytes(n_)}, alpha = {a_ * 1e6:.3g} us, {1 / b_ / 1e9:.3g} GB/s: "
                     f"{best} wins", fontsize=9)
        ax.figure.tight_layout()
        t = Table(["algorithm", "time (ms)"], title=f"winner: {best}")
        for k, v in sorted(times.items(), key=lambda kv: kv[1]):
            t.add(algorithm=k, **{"time (ms)": v * 1e3})
        return ax.figure, t

    if interactive is None:
        interactive = widgets_available()
    if not interactive:
        return draw(p, n_bytes, alpha, beta)

    p_w = w.IntSlider(value=int(math.log2(p)), min=1, max=14, description="log2 P")
    n_w = w.FloatLogSlider(value=n_bytes, base=2, min=2, max=32, step=1, description="bytes")
    a_w = w.FloatLogSlider(value=alpha, base=10, min=-7, max=-3, step=0.1, description="alpha (s)",
                           readout_format=".1e")
    bw_w = w.FloatLogSlider(value=1 / beta, base=10, min=8, max=12, step=0.1, description="bytes/s",
                            readout_format=".1e")
    out = w.Output()

    def update(*_):
        with out:
            out.clear_output(wait=True)
            fig, t = draw(2**p_w.value, n_w.value, a_w.value, 1 / bw_w.value)
            display(fig)
            plt.close(fig)
            display(t)

    for s in (p_w, n_w, a_w, bw_w):
        s.observe(update, names="value")
    display(w.VBox([w.HBox([p_w, n_w]), w.HBox([a_w, bw_w]), out]))
    update()
    return None, None
