"""Interactive widgets: try a setting yourself and watch the result (lessons 03, 05, 08, 09).

Under papermill, CI or a script (no widget frontend) every widget call runs once with its
defaults and returns a static figure, so the lessons stay executable everywhere.

A kernel cannot see whether a frontend will render its widgets, so the choice follows
``course_lib.progress.resolve_progress`` ($CI, $COURSE_PROFILE: static). ``$COURSE_WIDGETS``
overrides it: ``live`` where a real frontend is known to be there although a profile is set
(tests/test_browser.py runs the smoke profile in JupyterLab in a browser), ``static`` to get the
figures in a notebook a person drives; empty or ``auto``: the default.
"""

from __future__ import annotations

import math
import os

import ipywidgets as w
import matplotlib.pyplot as plt
from IPython.display import display

from .diagrams import fp16_number_line, fp16_number_lines
from .optim.schedules import DECAY_KINDS, lr_at, scaled_lr
from .plots import plot_curve, plot_lr_schedules
from .progress import resolve_progress
from .tables import Table
from .train.ncf import train_to_target


WIDGETS_ENV = "COURSE_WIDGETS"
WIDGETS_MODES = ("auto", "live", "static")


def widgets_available() -> bool:
    """True in a notebook a person drives (ipywidgets can render); False under papermill/CI/scripts.

    ``$COURSE_WIDGETS=live`` or ``static`` overrides the guess (see the module's docstring).
    """
    mode = os.environ.get(WIDGETS_ENV, "").strip().lower() or "auto"
    if mode not in WIDGETS_MODES:
        raise ValueError(f"${WIDGETS_ENV}={mode!r}: choose one of {WIDGETS_MODES} (empty means auto)")
    if mode != "auto":
        return mode == "live"
    return resolve_progress("auto") == "bar"  # CI, $COURSE_PROFILE, scripts: no widget frontend


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
    def draw(p_, n_, a_, b_):
        return _allreduce_prediction(p_, n_, a_, b_, gamma)

    if interactive is None:
        interactive = widgets_available()
    if not interactive:
        return draw(p, n_bytes, alpha, beta)

    p_w = w.IntSlider(value=int(math.log2(p)), min=1, max=14, description="log2 P")
    n_w = w.FloatLogSlider(value=n_bytes, base=2, min=2, max=32, step=1, description="bytes")
    a_w = w.FloatLogSlider(value=alpha, base=10, min=-7, max=-3, step=0.1, description="alpha (s)",
                           readout_format=".1e")
    # a measured fit may resolve no bandwidth term (beta = 0, comm.fit_text) or no latency (alpha = 0): a log slider
    # cannot sit at an infinite bandwidth or a zero alpha, so it starts at its end and the note says so
    bw_w = w.FloatLogSlider(value=1 / beta if beta > 0 else 1e12, base=10, min=8, max=12, step=0.1,
                            description="bytes/s", readout_format=".1e")
    note = _unresolved_fit_note(alpha, beta)
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
    display(w.VBox([w.HBox([p_w, n_w]), w.HBox([a_w, bw_w])] + note + [out]))
    update()
    return None, None


def _allreduce_prediction(p_: int, n_: float, a_: float, b_: float, gamma: float):
    """:func:`allreduce_explorer`'s bar chart and table of each algorithm's modelled time for one setting."""
    from .comm.cost import ALLREDUCE_MODELS
    from .comm import cost

    models = dict(ALLREDUCE_MODELS, rabenseifner=cost.rabenseifner_allreduce_time,
                  **{"flat tree": cost.flat_tree_allreduce_time})
    times = {k: f(n_, p_, a_, b_, gamma) for k, f in models.items()}
    best = min(times, key=times.get)
    _, ax = plt.subplots(figsize=(6.5, 3))
    ax.barh(list(times), [v * 1e3 for v in times.values()],
            color=["tab:green" if k == best else "tab:gray" for k in times])
    ax.set_xscale("log")
    ax.set_xlabel("modelled all-reduce time (ms)")
    link = f"{1 / b_ / 1e9:.3g} GB/s" if b_ > 0 else "no bandwidth term"  # a fit may resolve none (comm.fit_text)
    ax.set_title(f"p = {p_}, {cost.human_bytes(n_)}, alpha = {a_ * 1e6:.3g} us, {link}: {best} wins", fontsize=9)
    ax.figure.tight_layout()
    t = Table(["algorithm", "time (ms)"], title=f"winner: {best}")
    for k, v in sorted(times.items(), key=lambda kv: kv[1]):
        t.add(algorithm=k, **{"time (ms)": v * 1e3})
    return ax.figure, t


def _unresolved_fit_note(alpha: float, beta: float) -> list:
    """A label saying which term the fit did not resolve (the slider starts at its end), or nothing."""
    unresolved = [what for what, v in (("no bandwidth term (beta = 0): bytes/s starts at its fastest, 1e12", beta),
                                       ("no latency (alpha = 0): alpha starts at its smallest, 1e-7 s", alpha))
                  if v <= 0]
    return [w.Label(value="the fit resolved " + "; and ".join(unresolved))] if unresolved else []


def schedule_builder(*, peak_lr: float = 0.01, warmup_steps: int = 100, total_steps: int = 1000,
                     warmup: str = "linear", decay: str = "cosine", base_lr: float | None = None,
                     base_batch: int = 256, batch: int | None = None, rule: str = "linear",
                     interactive: bool | None = None):
    """Build an lr schedule and see it (lesson 03): the course's own ``lr_at`` over the run.

    With ``batch`` and ``base_lr`` given, the peak lr is derived from them by ``rule`` (the
    lesson 02 rules), as the training settings derive it. With a widget frontend: sliders for
    the batch, warmup length and run length, and menus for the warmup kind, the decay and the
    rule. Otherwise one static ``(figure, table)``: the lr at a few landmark steps.
    """
    def draw(b, warm, total, warm_kind, decay_kind, rule_):
        peak = scaled_lr(rule_, base_lr, b, base_batch) if base_lr is not None and b else peak_lr
        warm = min(warm, total)
        steps = list(range(total + 1))
        lrs = [lr_at(s, peak_lr=peak, warmup_steps=warm, total_steps=total, warmup=warm_kind, decay=decay_kind)
               for s in steps]
        label = f"peak {peak:.3g}" + (f" (batch {b}, {rule_} rule from {base_lr:g} at {base_batch})"
                                       if base_lr is not None and b else "")
        fig = plot_lr_schedules({label: (steps, lrs)})
        fig.axes[0].set_title(f"{warm_kind} warmup over {warm} steps, then {decay_kind} decay to step {total}",
                              fontsize=9)
        t = Table(["step", "lr"], title="the lr at landmark steps")
        for s in sorted({0, warm // 2, warm, (warm + total) // 2, total}):
            t.add(step=s, lr=lrs[s])
        return fig, t

    if base_lr is not None and batch is None:
        batch = base_batch
    if interactive is None:
        interactive = widgets_available()
    if not interactive:
        return draw(batch, warmup_steps, total_steps, warmup, decay, rule)

    b_w = w.Dropdown(options=sorted({base_batch * 2**i for i in range(0, 9)} | {batch or base_batch}),
                     value=batch or base_batch,
                     description="batch", disabled=base_lr is None)
    rule_w = w.Dropdown(options=["linear", "sqrt", "none"], value=rule, description="rule", disabled=base_lr is None)
    warm_w = w.IntSlider(value=warmup_steps, min=0, max=total_steps, step=max(1, total_steps // 100),
                         description="warmup")
    total_w = w.IntSlider(value=total_steps, min=10, max=10 * total_steps, step=10, description="total steps")
    kind_w = w.Dropdown(options=["linear", "exponential"], value=warmup, description="warmup kind")
    decay_w = w.Dropdown(options=list(DECAY_KINDS), value=decay, description="decay")
    out = w.Output()

    def update(*_):
        with out:
            out.clear_output(wait=True)
            fig, t = draw(b_w.value, warm_w.value, total_w.value, kind_w.value, decay_w.value, rule_w.value)
            display(fig)
            plt.close(fig)
            display(t)

    for c in (b_w, rule_w, warm_w, total_w, kind_w, decay_w):
        c.observe(update, names="value")
    display(w.VBox([w.HBox([b_w, rule_w]), w.HBox([warm_w, total_w]), w.HBox([kind_w, decay_w]), out]))
    update()
    return None, None


def loss_scaling_explorer(log2_magnitudes, *, scale: float = 2.0 ** 16, interactive: bool | None = None):
    """Slide the loss scale and watch the gradients move along fp16's number line (lesson 05):
    the fractions lost to zero, stored as subnormals and overflowing, for the learner's own
    measured gradients. ``log2_magnitudes``: one array, or ``{label: array}`` for one panel each
    (parameter and activation gradients, moved by the same slider). Without a widget frontend:
    one static ``(figure, fractions)`` (``{label: fractions}`` for several panels)."""
    if interactive is None:
        interactive = widgets_available()

    def draw(s):
        if isinstance(log2_magnitudes, dict):
            return fp16_number_lines(log2_magnitudes, s)
        return fp16_number_line(log2_magnitudes, s)

    if not interactive:
        return draw(scale)

    s_w = w.IntSlider(value=int(round(math.log2(scale))), min=0, max=32, description="log2 scale")
    out = w.Output()

    def update(*_):
        with out:
            out.clear_output(wait=True)
            fig, _ = draw(2.0 ** s_w.value)
            display(fig)
            plt.close(fig)

    s_w.observe(update, names="value")
    display(w.VBox([s_w, out]))
    update()
    return None, None


def step_explorer(models: dict, *, p: int = 64, global_batch: int = 4096, flops_factor: float = 1.0,
                  bandwidth_factor: float = 1.0, alpha: float = 5e-6, link_Bps: float = 50e9,
                  min_steps: float = 1000, critical_batch: float = 4096, interactive: bool | None = None,
                  networks: dict | None = None, network: str | None = None, illustrative: bool = False):
    """Device FLOPS and bandwidth (x this machine), interconnect, P, global batch, model -> predicted step
    time, efficiency and time to target (lesson 09).

    ``models``: name -> ``(counts_a, counts_b, curves, step_overhead_s)`` (two counted steps of the model,
    this machine's probe curves and measured overhead). ``networks``: name -> ``(alpha_s, bytes_per_s)``
    of named links (e.g. :func:`course_lib.lessons.l09_paleo.named_links`): a dropdown that sets the two
    link sliders; ``network`` picks one of them instead of ``alpha`` / ``link_Bps``. ``illustrative``: ``min_steps``
    and ``critical_batch`` are made-up values (lesson 02's runs did not fit), and the table's steps and time to
    target say so. With a widget frontend: sliders and dropdowns; otherwise one static ``(figure, table)`` for the
    given values.
    """
    if network is not None:
        if not networks or network not in networks:
            raise ValueError(f"network={network!r} is not one of the networks given: {sorted(networks or {})}")
        alpha, link_Bps = networks[network]

    def draw(name, p_, gb, ff, bf, a_, bw):
        return _step_prediction(models[name], name, p_, gb, ff, bf, a_, bw, min_steps=min_steps,
                                critical_batch=critical_batch, illustrative=illustrative)

    name0 = next(iter(models))
    if interactive is None:
        interactive = widgets_available()
    if not interactive:
        return draw(name0, p, global_batch, flops_factor, bandwidth_factor, alpha, link_Bps)

    m_w = w.Dropdown(options=list(models), value=name0, description="model")
    p_w = w.IntSlider(value=int(math.log2(p)), min=0, max=10, description="log2 P")
    b_w = w.IntSlider(value=int(math.log2(global_batch)), min=4, max=20, description="log2 batch")
    f_w = w.FloatLogSlider(value=flops_factor, base=10, min=-1, max=5, step=0.1, description="FLOPS x")
    m2_w = w.FloatLogSlider(value=bandwidth_factor, base=10, min=-1, max=3, step=0.1, description="memory BW x")
    a_w = w.FloatLogSlider(value=alpha, base=10, min=-7, max=-3, step=0.1, description="alpha (s)",
                           readout_format=".1e")
    l_w = w.FloatLogSlider(value=link_Bps, base=10, min=8, max=12, step=0.1, description="link B/s",
                           readout_format=".1e")
    out = w.Output()
    net_row = [_network_dropdown(networks, network, a_w, l_w)] if networks else []

    def update(*_):
        with out:
            out.clear_output(wait=True)
            fig, t = draw(m_w.value, 2**p_w.value, 2**b_w.value, f_w.value, m2_w.value, a_w.value, l_w.value)
            display(fig)
            plt.close(fig)
            display(t)

    for s in (m_w, p_w, b_w, f_w, m2_w, a_w, l_w):
        s.observe(update, names="value")
    display(w.VBox([w.HBox([m_w, p_w, b_w]), w.HBox([f_w, m2_w]), w.HBox([a_w, l_w, *net_row]), out]))
    update()
    return None, None


def _network_dropdown(networks: dict, network: str | None, alpha_slider, link_slider):
    """A dropdown of named links that sets the alpha and link-bandwidth sliders when one is picked."""
    n_w = w.Dropdown(options=["(sliders)"] + list(networks), value=network or "(sliders)", description="network")

    def pick(change):
        if change["new"] in networks:
            alpha_slider.value, link_slider.value = networks[change["new"]]

    n_w.observe(pick, names="value")
    return n_w


def _step_prediction(model: tuple, name: str, p_: int, gb: int, ff: float, bf: float, a_: float, bw: float, *,
                     min_steps: float, critical_batch: float, illustrative: bool):
    """:func:`step_explorer`'s figure (efficiency against devices) and table (the largest P) for one setting."""
    from .perf import model as M
    from .perf.model import steps_to_target

    counts_a, counts_b, curves, overhead = model
    dev = M.scale_curves(curves, flops_factor=ff, bandwidth_factor=bf)
    link = (a_, 1 / bw)
    ps = [q for q in (2**k for k in range(0, 15)) if q <= p_ and gb / q >= 1]
    rows = M.scaling_curve(counts_a, counts_b, dev, link, batch=gb, ps=ps, step_overhead_s=overhead)
    _, ax = plt.subplots(figsize=(6.5, 3))
    ax.plot([r["p"] for r in rows], [r["efficiency"] for r in rows], "o-")
    ax.set(xscale="log", xlabel="devices", ylabel="strong-scaling efficiency", ylim=(0, 1.1))
    ax.set_title(f"{name}: global batch {gb}, device x{ff:g} FLOPS x{bf:g} bandwidth, "
                 f"{bw / 1e9:.3g} GB/s links", fontsize=9)
    ax.figure.tight_layout()
    return ax.figure, _step_table(name, rows[-1], steps_to_target(gb, min_steps, critical_batch), illustrative)


def _step_table(name: str, last: dict, steps: float, illustrative: bool) -> Table:
    """The predicted step, throughput, efficiency and time to target on the largest P."""
    t = Table(["quantity", "value"], title=f"{name} on {last['p']} devices")
    t.add(quantity="step (ms)", value=last["step (ms)"])
    t.add(quantity="samples/s", value=last["samples/s"])
    t.add(quantity="efficiency", value=last["efficiency"])
    t.add(quantity="exposed all-reduce (ms)", value=last["exposed comm (ms)"])
    # made-up S_min and B_crit are said so in the row itself, not only in a cell after the table
    made_up = ", illustrative S_min and B_crit" if illustrative else ""
    t.add(quantity=f"steps to target (McCandlish model{made_up})", value=steps)
    t.add(quantity=f"time to target (s{made_up})", value=steps * last["step (ms)"] / 1e3)
    return t
