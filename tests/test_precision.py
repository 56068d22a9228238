"""course_lib.precision: autocast dtypes, dynamic loss scaling, unscale before the step (lessons 05, 07)."""

import pytest
import torch

from course_lib.hardware import EMULATED, detect
from course_lib.optim import LAMB, param_groups
from course_lib.precision import Precision, auto_mode


def _model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))


@pytest.mark.parametrize("mode,dtype", [("fp32", torch.float32), ("bf16", torch.bfloat16), ("fp16", torch.float16)])
def test_autocast_dtype_on_cpu(mode, dtype):
    prec = Precision(mode, "cpu")
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    with prec.autocast():
        assert (a @ b).dtype == dtype
    assert (prec.scaler is not None) == (mode == "fp16")


@pytest.mark.parametrize("bad", [float("inf"), float("nan")], ids=["inf", "nan"])
def test_fp16_overflow_step_is_skipped_and_scale_halves(monkeypatch, bad):
    # the verdict is GradScaler's own (found_inf_per_device), not a second pass over the gradients
    monkeypatch.setattr(Precision, "_grads_finite", staticmethod(lambda opt: pytest.fail("extra isfinite pass")))
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    prec = Precision("fp16", "cpu", init_scale=1024.0)
    before = [p.detach().clone() for p in model.parameters()]
    prec.backward(model(torch.randn(4, 8)).sum())
    next(model.parameters()).grad[0, 0] = bad  # a forced overflow (inf), or a NaN (inf - inf, 0 * inf)
    assert prec.step(opt) is False
    prec.update()
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert prec.skipped_steps == 1 and prec.skipped_at == [0]
    assert prec.scale_history == [512.0]
    # the next, finite step goes through
    opt.zero_grad()
    prec.backward(model(torch.randn(4, 8)).sum())
    assert prec.step(opt) is True
    prec.update()
    assert prec.skipped_steps == 1 and len(prec.scale_history) == 2


@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")], ids=["inf", "-inf", "nan"])
def test_the_fallback_finiteness_pass_catches_inf_and_nan(bad):
    # used when torch's GradScaler no longer exposes its flags; `~isinf` in place of isfinite misses NaN
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(4, 8)).sum().backward()
    assert Precision._grads_finite(opt) is True
    list(model.parameters())[-1].grad[0] = bad
    assert Precision._grads_finite(opt) is False


def test_step_unscales_gradients_and_lamb_trust_ratio_matches():
    x, y = torch.randn(16, 8), torch.randn(16, 1)
    ref, scaled = _model(), _model()
    ref_opt = LAMB(param_groups(ref, 0.01), lr=0.01, max_grad_norm=1.0)
    sc_opt = LAMB(param_groups(scaled, 0.01), lr=0.01, max_grad_norm=1.0)
    # fp32 reference
    torch.nn.functional.mse_loss(ref(x), y).backward()
    ref_opt.step()
    # the same fp32 math with the loss scaled by 2**16: step must unscale first
    prec = Precision("fp16", "cpu", init_scale=2.0**16)
    prec.backward(torch.nn.functional.mse_loss(scaled(x), y))
    assert prec.step(sc_opt) is True
    for p, q in zip(ref.parameters(), scaled.parameters()):
        torch.testing.assert_close(q.grad, p.grad)  # gradients after the step are the true ones
        torch.testing.assert_close(q, p)
        torch.testing.assert_close(sc_opt.state[q]["trust_ratio"], ref_opt.state[p]["trust_ratio"])


def test_unscale_then_clip_then_step_unscales_once():
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    prec = Precision("fp16", "cpu", init_scale=256.0)
    prec.backward(model(torch.randn(4, 8)).sum())
    prec.unscale_(opt)
    g = next(model.parameters()).grad.clone()
    assert prec.step(opt)  # does not unscale a second time (GradScaler would raise)
    torch.testing.assert_close(next(model.parameters()).grad, g)
    prec.update()


def test_auto_picks_what_the_docstring_says_on_this_cpu():
    hw = detect()
    prec = Precision("auto", "cpu", hw=hw)
    expected = "bf16" if hw.bf16_autocast == "native" and not hw.gpu_count else "fp32"
    assert prec.mode == expected and prec.requested == "auto"


def test_auto_mode_rules():
    class HW:
        def __init__(self, bf16, gpus):
            self.bf16_autocast, self.gpu_count = bf16, gpus

    assert auto_mode(HW("native", 1), "cuda") == "bf16"
    assert auto_mode(HW(EMULATED, 1), "cuda") == "fp16"
    assert auto_mode(HW(EMULATED, 0), "cpu") == "fp32"
    assert auto_mode(HW("native", 0), "cpu") == "bf16"


def test_bad_mode_is_refused():
    with pytest.raises(ValueError, match="choose one of"):
        Precision("fp8")


def test_fp16_fates_are_what_the_cast_does():
    from course_lib.precision import fp16_fates

    v = torch.tensor([2.0 ** -26, 2.0 ** -25, 2.0 ** -20, 2.0 ** -15, 1.0, 60000.0, 65520.0, 1e5])
    assert fp16_fates(v) == {"zero": 0.25, "subnormal": 0.25, "normal": 0.25, "inf": 0.25}
    assert fp16_fates(v[:0]) == {"zero": 0.0, "subnormal": 0.0, "normal": 0.0, "inf": 0.0}


# --------------------------------------------------------------------------- static loss scaling and no scaling (lesson
# 05)


def _grads(model):
    return [p.grad.detach().clone() for p in model.parameters()]


def test_a_static_scaler_scales_the_gradients_by_s_and_unscales_them_back_and_never_changes_s():
    x = torch.randn(16, 8)
    ref, scaled = _model(), _model()
    torch.nn.functional.mse_loss(ref(x), torch.zeros(16, 1)).backward()  # the unscaled gradients
    s = 2.0 ** 10
    prec = Precision("fp16", "cpu", loss_scaling="static", init_scale=s)
    assert prec.loss_scaling == "static" and prec.scale == s
    prec.backward(torch.nn.functional.mse_loss(scaled(x), torch.zeros(16, 1)))  # fp32 math, scaled loss
    for g, q in zip(_grads(ref), scaled.parameters()):
        torch.testing.assert_close(q.grad, s * g)  # before unscale: S x the true gradient (S a power of 2: exact)
    opt = torch.optim.SGD(scaled.parameters(), lr=0.1)
    assert prec.step(opt) is True
    prec.update()
    for g, q in zip(_grads(ref), scaled.parameters()):
        torch.testing.assert_close(q.grad, g)  # after: the true gradient
    # an overflow: the step is skipped and counted, and S stays (a dynamic scaler would halve it)
    opt.zero_grad()
    prec.backward(scaled(x).sum())
    next(scaled.parameters()).grad[0, 0] = float("inf")
    before = [p.detach().clone() for p in scaled.parameters()]
    assert prec.step(opt) is False
    prec.update()
    assert all(torch.equal(a, b) for a, b in zip(before, scaled.parameters()))
    assert prec.skipped_steps == 1 and prec.skipped_at == [1]
    assert prec.scale_history == [s, s] and prec.state()["loss_scaling"] == "static"
    assert prec.state()["growth_interval"] is None


class _SpyOptimizer(torch.optim.SGD):
    """Records the gradients it reads at step()."""

    def step(self, closure=None):
        self.seen = [p.grad.detach().clone() for g in self.param_groups for p in g["params"]]
        return super().step(closure)


@pytest.mark.parametrize("scaling", ["dynamic", "static"])
def test_step_unscales_before_the_optimizer_reads_the_gradients(scaling):
    x = torch.randn(16, 8)
    ref, scaled = _model(), _model()
    ref(x).pow(2).mean().backward()
    prec = Precision("fp16", "cpu", loss_scaling=scaling, init_scale=2.0 ** 12)
    opt = _SpyOptimizer(scaled.parameters(), lr=0.1)
    prec.backward(scaled(x).pow(2).mean())
    assert prec.step(opt) is True
    for g, seen in zip(_grads(ref), opt.seen):
        torch.testing.assert_close(seen, g)


@pytest.mark.parametrize("scaling", ["dynamic", "static"])
def test_lars_trust_ratios_after_a_scaled_backward_are_the_unscaled_ones(scaling):
    # apex#1030: a trust ratio taken on loss-scaled gradients is off by the scale; Precision.step unscales first
    from course_lib.optim import LARS

    x = torch.randn(16, 8)
    ref, scaled = _model(), _model()
    ref_opt = LARS(param_groups(ref, 1e-4), lr=0.1, weight_decay=1e-4)
    sc_opt = LARS(param_groups(scaled, 1e-4), lr=0.1, weight_decay=1e-4)
    ref(x).pow(2).mean().backward()
    ref_opt.step()
    prec = Precision("fp16", "cpu", loss_scaling=scaling, init_scale=2.0 ** 16)
    prec.backward(scaled(x).pow(2).mean())
    assert prec.step(sc_opt)
    for p, q in zip(ref.parameters(), scaled.parameters()):
        torch.testing.assert_close(sc_opt.state[q]["trust_ratio"], ref_opt.state[p]["trust_ratio"])
        torch.testing.assert_close(q, p)


def test_fp16_without_loss_scaling_has_no_scaler_and_takes_every_step():
    prec = Precision("fp16", "cpu", loss_scaling="none")
    assert prec.scaler is None and prec.loss_scaling == "none" and prec.scale == 1.0
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with prec.autocast():
        out = model(torch.randn(4, 8))
    assert out.dtype == torch.float16
    prec.backward(out.float().sum())
    assert prec.step(opt) is True and "loss scaling=off" in repr(prec)
    assert Precision("bf16", "cpu", loss_scaling="static").loss_scaling == "none"  # bf16 needs no scaling


def test_bad_loss_scaling_settings_are_refused():
    with pytest.raises(ValueError, match="loss_scaling='fixed'; choose one of"):
        Precision("fp16", loss_scaling="fixed")
    with pytest.raises(ValueError, match="positive finite"):
        Precision("fp16", loss_scaling="static", init_scale=0.0)
    from course_lib.precision import StaticLossScaler

    with pytest.raises(ValueError, match="positive finite"):
        StaticLossScaler(float("inf"))


def test_run_settings_carry_the_loss_scaling_to_the_engine():
    from course_lib.train import TrainConfig

    cfg = TrainConfig(precision="fp16", loss_scaling="static", loss_scale=1024.0)
    assert cfg.describe().endswith("fp16 (static loss scale 1024)")
    assert TrainConfig(precision="fp16", loss_scaling="none").describe().endswith("fp16 (no loss scaling)")
    assert TrainConfig(precision="fp16").describe().endswith("; fp16")
    with pytest.raises(ValueError, match="loss_scaling='off'; choose one of"):
        TrainConfig(loss_scaling="off")
    with pytest.raises(ValueError, match="loss_scale must be a positive number"):
        TrainConfig(loss_scale=-1.0)


def test_a_static_scaler_survives_a_checkpoint():
    from course_lib.precision import StaticLossScaler

    a, b = StaticLossScaler(512.0), StaticLossScaler(1.0)
    b.load_state_dict(a.state_dict())
    assert b.get_scale() == 512.0
