"""Mixed precision in one small object: autocast, static or dynamic loss scaling, unscale-before-step
(lessons 05 and 07).

``Precision(mode, device)`` gives the training loop four calls::

    prec = Precision("auto", device)
    with prec.autocast():
        loss = model(x, y)
    prec.backward(loss)          # loss * scale for fp16, plain backward otherwise
    prec.unscale_(optimizer)     # optional: before clipping; step() does it if you did not
    took_step = prec.step(optimizer)  # False when fp16 found inf/nan and skipped the update
    prec.update()                # adjust the fp16 loss scale, record it

Modes:

- ``"fp32"``: no autocast, no scaler.
- ``"bf16"``: ``torch.autocast(device_type, torch.bfloat16)``. bfloat16 has fp32's
  exponent range, so gradients do not underflow and no loss scaling is needed.
- ``"fp16"``: ``torch.autocast(device_type, torch.float16)`` with loss scaling, one of
  ``loss_scaling=``

  - ``"dynamic"`` (the default): a ``torch.amp.GradScaler``. The loss is multiplied by a
    large scale (``init_scale``, 65536 by default) so that small gradients survive fp16's
    narrow range; when a step produces inf/nan the step is skipped and the scale halved,
    and after ``growth_interval`` good steps it doubles.
  - ``"static"``: a :class:`StaticLossScaler`, a fixed S = ``init_scale`` chosen by you
    (the older recipe, Micikevicius et al. 2018): loss x S, gradients / S before the step,
    a step whose gradients overflowed is skipped and counted, and S never changes.
  - ``"none"``: fp16 autocast with no scaling at all; gradients that fp16 cannot hold become
    0 (or inf), and every step is taken. It exists to show what loss scaling prevents.
- ``"auto"``: chosen from :func:`course_lib.hardware.detect` — bf16 where it is native
  (Ampere or newer GPUs; CPUs with AVX512-BF16 or AMX), fp16 on GPUs without native
  bf16 (Volta, Turing), and fp32 on CPUs without native bf16. On such CPUs (AVX2-only
  servers, most laptops) autocast is emulated: we measured it about **20x slower than
  fp32** for NeuMF, so "auto" does not pick it there.

Why ``step`` always unscales first: LARS and LAMB compute trust ratios from gradient
norms, and LAMB's global pre-normalization and ordinary clipping compare the gradient
norm with a threshold; on loss-scaled gradients all of those are wrong (apex#1030).
``GradScaler.step`` would unscale too, but only *inside* its call, after anything the
loop did to the gradients, so we unscale explicitly, before the loop clips or steps.
"""

from __future__ import annotations

import contextlib
import math

import torch

from .hardware import detect

MODES = ("fp32", "bf16", "fp16", "auto")
LOSS_SCALINGS = ("dynamic", "static", "none")  # what fp16 does about its range (bf16/fp32 need none)
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def auto_mode(hw=None, device: torch.device | str = "cpu") -> str:
    """The mode ``"auto"`` resolves to on this machine for ``device`` (lesson 05)."""
    device = torch.device(device)
    if hw is None:
        hw = detect()
    if hw.bf16_autocast == "native":
        if device.type == "cuda" or not hw.gpu_count:
            return "bf16"
    if device.type == "cuda" and hw.gpu_count:
        return "fp16"  # a GPU without native bf16 (Volta, Turing) still has fp16 tensor cores
    return "fp32"  # a CPU without native bf16: emulated autocast is much slower than fp32


class StaticLossScaler:
    """A fixed loss scale S (lesson 05): ``scale(loss)`` is loss x S, ``unscale_`` divides the
    gradients by S and notes whether any is inf/nan, ``step`` skips the update when one was, and
    S never changes (``update`` only forgets the last step's verdict). GradScaler's interface, so
    :class:`Precision` and checkpoints treat both alike; GradScaler itself cannot be made static
    (it refuses ``growth_factor=1`` and ``backoff_factor=1``: "The growth factor must be > 1.0",
    torch 2.13)."""

    def __init__(self, scale: float):
        if not (math.isfinite(scale) and scale > 0):
            raise ValueError(f"a static loss scale must be a positive finite number, got {scale!r}")
        self._scale = float(scale)
        self.found_inf: bool | None = None  # None: not unscaled since the last update

    def get_scale(self) -> float:
        return self._scale

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        return loss * self._scale

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Gradients / S in place, in one pass per (device, dtype) that also flags inf/nan: the op
        ``GradScaler.unscale_`` uses (``torch._amp_foreach_non_finite_check_and_unscale_``, private but
        what torch.amp itself calls; checked against torch 2.13)."""
        groups: dict = {}
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    groups.setdefault((p.grad.device, p.grad.dtype), []).append(p.grad)
        found = False
        for (device, _), grads in groups.items():
            flag = torch.zeros(1, device=device)
            torch._amp_foreach_non_finite_check_and_unscale_(grads, flag, torch.full((1,), 1.0 / self._scale,
                                                                                     device=device))
            found = found or bool(flag.item())
        self.found_inf = found

    def step(self, optimizer: torch.optim.Optimizer) -> bool:
        """``optimizer.step()`` unless the unscaled gradients held inf/nan; True when it stepped."""
        if self.found_inf is None:
            self.unscale_(optimizer)
        if self.found_inf:
            return False
        optimizer.step()
        return True

    def update(self) -> None:
        self.found_inf = None

    def state_dict(self) -> dict:
        return {"scale": self._scale}

    def load_state_dict(self, state: dict) -> None:
        self._scale = float(state["scale"])


class Precision:
    """Autocast + (for fp16) static, dynamic or no loss scaling, with gradients unscaled before every step
    (lessons 05, 07).

    ``.mode`` is the resolved mode (never ``"auto"``), ``.dtype`` the autocast dtype
    (``torch.float32`` for fp32), ``.loss_scaling`` what fp16 does ("dynamic", "static",
    or "none"; always "none" for bf16/fp32), ``.scaler`` the ``GradScaler``, the
    :class:`StaticLossScaler`, or None. Over a run it records ``.scale_history`` (the loss
    scale after each ``update``; 1.0 each step without a scaler) and ``.skipped_steps`` (how
    many updates were skipped because of inf/nan gradients), with ``.skipped_at`` the step indices.
    """

    def __init__(self, mode: str = "fp32", device: torch.device | str = "cpu", *, loss_scaling: str = "dynamic",
                 init_scale: float = 2.0**16, growth_interval: int = 2000, hw=None):
        if mode not in MODES:
            raise ValueError(f"precision mode {mode!r}; choose one of {MODES}")
        if loss_scaling not in LOSS_SCALINGS:
            raise ValueError(f"loss_scaling={loss_scaling!r}; choose one of {LOSS_SCALINGS}")
        if not (math.isfinite(init_scale) and init_scale > 0):
            raise ValueError(f"the loss scale (init_scale) must be a positive finite number, got {init_scale!r}")
        self.device = torch.device(device)
        self.requested = mode
        self.mode = auto_mode(hw, self.device) if mode == "auto" else mode
        self.dtype = _DTYPES.get(self.mode, torch.float32)
        self.loss_scaling = loss_scaling if self.mode == "fp16" else "none"
        self.growth_interval = growth_interval if self.loss_scaling == "dynamic" else None
        self.scaler = None
        if self.loss_scaling == "dynamic":
            self.scaler = torch.amp.GradScaler(self.device.type, init_scale=init_scale,
                                               growth_interval=growth_interval)
        elif self.loss_scaling == "static":
            self.scaler = StaticLossScaler(init_scale)
        self.scale_history: list[float] = []
        self.skipped_steps = 0
        self.skipped_at: list[int] = []
        self._steps = 0
        self._unscaled = False
        self._last_step_taken = True

    def __repr__(self) -> str:
        auto = " (auto)" if self.requested == "auto" else ""
        scaling = {"dynamic": "dynamic", "static": f"static {self.scale:g}"}.get(self.loss_scaling, "off")
        return (f"Precision({self.mode!r}{auto}, device={str(self.device)!r}, "
                f"loss scaling={scaling}, fp32 matmuls={self.fp32_matmul})")

    @property
    def scale(self) -> float:
        """The current loss scale (1.0 without a scaler)."""
        return float(self.scaler.get_scale()) if self.scaler is not None else 1.0

    def autocast(self):
        """The forward-pass context: ``torch.autocast`` for bf16/fp16, a null context for fp32."""
        if self.mode == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.dtype)

    def backward(self, loss: torch.Tensor) -> None:
        """``loss.backward()``, with the loss multiplied by the current scale (fp16 with loss scaling)."""
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
        else:
            loss.backward()

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Divide the gradients by the loss scale, in place, once per step (no-op without a scaler).

        Call it before clipping or reading gradient norms; ``step`` calls it when you did not.
        """
        if self.scaler is not None and not self._unscaled:
            self.scaler.unscale_(optimizer)
        self._unscaled = True

    @staticmethod
    def _grads_finite(optimizer: torch.optim.Optimizer) -> bool:
        flags = [torch.isfinite(p.grad).all() for g in optimizer.param_groups for p in g["params"]
                 if p.grad is not None]
        return bool(torch.stack(flags).all()) if flags else True

    def _found_no_inf(self, optimizer: torch.optim.Optimizer) -> bool:
        """The scaler's own inf/nan verdict for this step: the static scaler's flag, or GradScaler's
        (``found_inf_per_device``, filled by ``unscale_``: a private field of torch.amp.GradScaler,
        checked against torch 2.13); a full pass over the gradients only if a future torch moves it."""
        if isinstance(self.scaler, StaticLossScaler):
            return not self.scaler.found_inf
        flags = getattr(self.scaler, "_per_optimizer_states", {}).get(id(optimizer), {}).get("found_inf_per_device")
        if not flags:
            return self._grads_finite(optimizer)
        return not bool(sum(v.item() for v in flags.values()))

    def step(self, optimizer: torch.optim.Optimizer) -> bool:
        """Unscale (if scaling), then ``optimizer.step()`` unless a gradient is inf/nan; True when the step was taken.

        Without a scaler the step is always taken (bf16, fp32 and fp16 without loss scaling do not skip).
        """
        self.unscale_(optimizer)
        if self.scaler is None:
            optimizer.step()
            taken = True
        else:
            # The gradients are unscaled now; an inf/nan among them means the scale was too
            # large for this step. The scaler's unscale_ has already checked every gradient and
            # its step reads those flags (one .item() per device) to skip the update, so
            # the step reuses them rather than making a second pass over the gradients.
            taken = self._found_no_inf(optimizer)
            self.scaler.step(optimizer)
        if not taken:
            self.skipped_steps += 1
            self.skipped_at.append(self._steps)
        self._last_step_taken = taken
        return taken

    def update(self) -> None:
        """End of a step: let the scaler adjust its scale (dynamic: halve after inf/nan, grow after a run
        of good steps; static: unchanged); record it."""
        if self.scaler is not None:
            self.scaler.update()
        self.scale_history.append(self.scale)
        self._steps += 1
        self._unscaled = False

    @property
    def fp32_matmul(self) -> str:
        """How fp32 matrix products run here: "tf32" on GPUs when torch allows TensorFloat-32
        (``torch.backends.cuda.matmul.allow_tf32``; off by default since torch 1.12), else
        "fp32". An "fp32" baseline on an Ampere+ GPU is the slower, exact one unless it says tf32."""
        if self.device.type == "cuda" and torch.backends.cuda.matmul.allow_tf32:
            return "tf32"
        return "fp32"

    def state(self) -> dict:
        """What the run's record keeps: mode, loss scaling (kind, final scale, growth interval),
        skipped steps, and how fp32 matmuls ran."""
        return {"mode": self.mode, "requested": self.requested, "loss_scaling": self.loss_scaling,
                "loss_scale": self.scale, "growth_interval": self.growth_interval,
                "skipped_steps": self.skipped_steps, "fp32_matmul": self.fp32_matmul}


def fp16_fates(values: torch.Tensor) -> dict:
    """What casting ``values`` (nonzero, finite) to fp16 does to them, as fractions: flushed to
    ``zero``, stored as ``subnormal`` (fewer bits of precision), ``normal``, or overflowed to
    ``inf`` (lesson 05). The cast itself decides (IEEE round to nearest even), not thresholds."""
    n = values.numel()
    if n == 0:
        return {"zero": 0.0, "subnormal": 0.0, "normal": 0.0, "inf": 0.0}
    h = values.half()
    zero, inf = h == 0, torch.isinf(h)
    sub = ~zero & ~inf & (h.abs() < torch.finfo(torch.float16).tiny)
    fr = {k: float(m.sum()) / n for k, m in (("zero", zero), ("subnormal", sub), ("inf", inf))}
    return {"zero": fr["zero"], "subnormal": fr["subnormal"], "normal": 1.0 - sum(fr.values()), "inf": fr["inf"]}
