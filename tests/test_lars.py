"""LARS (course_lib.optim.lars): the equations, the zero-norm guard, exclusion, SGD, LARC clip, AMP."""

import math

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from course_lib.optim import LARS, lars_trust_ratio, param_groups

LR, MOMENTUM, WD, TC, EPS = 0.5, 0.9, 1e-2, 0.02, 1e-8


def tiny_model(dtype=torch.float64, zero_bias=False):
    """Linear(3, 4) -> tanh -> Linear(4, 2), the same weights on every call."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).to(dtype)
    if zero_bias:
        with torch.no_grad():
            for layer in (model[0], model[2]):
                layer.bias.zero_()
    return model


def loss_of(model, step=0):
    g = torch.Generator().manual_seed(100 + step)
    dtype = next(model.parameters()).dtype
    X = torch.randn(8, 3, generator=g, dtype=dtype)  # (B, in)
    y = torch.randn(8, 2, generator=g, dtype=dtype)  # (B, out)
    return nn.functional.mse_loss(model(X), y)


def backward(model, opt, step=0):
    opt.zero_grad()
    loss_of(model, step).backward()
    weights = {n: p.detach().clone() for n, p in model.named_parameters()}
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    return weights, grads


def one_param(values, grad):
    p = nn.Parameter(torch.tensor(values, dtype=torch.float64))
    p.grad = torch.tensor(grad, dtype=torch.float64)
    return p


# --- the trust ratio -----------------------------------------------------------------


def test_trust_ratio_by_hand():
    # ||w|| = ||(3, 4)|| = 5, ||g|| = ||(0.6, 0.8)|| = 1: 0.1 * 5 / (1 + 0.1 * 5) = 1/3
    ratio = lars_trust_ratio(5.0, 1.0, trust_coefficient=0.1, weight_decay=0.1, eps=0.0)
    assert isinstance(ratio, float)
    assert ratio == pytest.approx(1 / 3)
    as_tensor = lars_trust_ratio(torch.tensor(5.0), torch.tensor(1.0), trust_coefficient=0.1, weight_decay=0.1, eps=0.0)
    assert torch.is_tensor(as_tensor) and as_tensor.item() == pytest.approx(1 / 3)


@pytest.mark.parametrize("w_norm,g_norm", [(0.0, 1.0), (1.0, 0.0), (0.0, 0.0)])
def test_zero_norms_give_a_ratio_of_one(w_norm, g_norm):
    kw = dict(trust_coefficient=0.001, weight_decay=0.0, eps=0.0)  # eps=0: no help from eps
    assert lars_trust_ratio(w_norm, g_norm, **kw) == 1.0
    assert lars_trust_ratio(torch.tensor(w_norm), torch.tensor(g_norm), **kw).item() == 1.0


def test_trust_clip_is_min_of_ratio_over_lr_and_one():
    kw = dict(trust_coefficient=0.1, weight_decay=0.1, eps=0.0, trust_clip=True)
    assert lars_trust_ratio(5.0, 1.0, lr=1.0, **kw) == pytest.approx(1 / 3)
    assert lars_trust_ratio(5.0, 1.0, lr=2.0, **kw) == pytest.approx(1 / 6)
    assert lars_trust_ratio(5.0, 1.0, lr=0.1, **kw) == 1.0
    assert lars_trust_ratio(5.0, 1.0, lr=0.0, **kw) == 1.0  # first step of a warmup from 0
    with pytest.raises(ValueError, match="lr"):
        lars_trust_ratio(5.0, 1.0, **kw)


# --- the optimizer against its equations ------------------------------------------


def test_two_steps_match_the_equations_by_hand():
    model = tiny_model()
    opt = LARS(param_groups(model, WD), lr=LR, momentum=MOMENTUM, trust_coefficient=TC, eps=EPS)
    buf = {}
    for step in range(2):  # the second step checks the momentum buffer
        w_old, grads = backward(model, opt, step)
        opt.step()
        for name, p in model.named_parameters():
            w, g = w_old[name], grads[name]
            if name.endswith("weight"):  # decayed and adapted
                ratio = TC * w.norm() / (g.norm() + WD * w.norm() + EPS)
                scaled = (g + WD * w) * ratio
            else:  # bias: weight_decay=0 group, plain SGD with momentum
                ratio = torch.tensor(1.0, dtype=w.dtype)
                scaled = g
            buf[name] = scaled if step == 0 else MOMENTUM * buf[name] + scaled
            assert_close(p.detach(), w - LR * buf[name], rtol=1e-12, atol=1e-12)
            assert_close(opt.state[p]["trust_ratio"], ratio.float())
            assert opt.state[p]["trust_ratio"].dtype == torch.float32


def test_nesterov_by_hand():
    p = one_param([3.0, 4.0], [0.6, 0.8])
    opt = LARS([p], lr=1.0, momentum=0.5, weight_decay=0.1, trust_coefficient=0.1, eps=0.0, nesterov=True)
    w, g = p.detach().clone(), p.grad.clone()
    opt.step()
    scaled = (g + 0.1 * w) / 3  # trust ratio 1/3, see test_trust_ratio_by_hand
    buf = scaled
    assert_close(p.detach(), w - 1.0 * (scaled + 0.5 * buf))


def test_zero_weights_and_zero_grads_step_without_nan():
    zero_w = one_param([0.0, 0.0], [0.6, 0.8])
    zero_g = one_param([3.0, 4.0], [0.0, 0.0])
    opt = LARS([zero_w, zero_g], lr=0.5, momentum=0.0, weight_decay=0.1, eps=0.0)
    opt.step()
    for p in (zero_w, zero_g):
        assert opt.state[p]["trust_ratio"].item() == 1.0
        assert torch.isfinite(p).all()
    assert_close(zero_w.detach(), torch.tensor([-0.3, -0.4], dtype=torch.float64))  # -lr * g
    assert_close(zero_g.detach(), torch.tensor([3.0, 4.0], dtype=torch.float64) * (1 - 0.5 * 0.1))  # decay only


def test_trust_clip_replaces_a_larger_lr_by_the_layer_lr():
    # raw ratio 1/3 < lr: LARC uses the ratio itself as the step size, whatever lr is.
    results = {}
    for clip in (False, True):
        for lr in (1.0, 2.0):
            p = one_param([3.0, 4.0], [0.6, 0.8])
            LARS([p], lr=lr, momentum=0.0, weight_decay=0.1, trust_coefficient=0.1, eps=0.0, trust_clip=clip).step()
            results[clip, lr] = p.detach()
    w, g = torch.tensor([3.0, 4.0], dtype=torch.float64), torch.tensor([0.6, 0.8], dtype=torch.float64)
    assert_close(results[True, 1.0], w - (1 / 3) * (g + 0.1 * w))
    assert_close(results[True, 2.0], results[True, 1.0])
    assert_close(results[False, 2.0], w - 2.0 * (1 / 3) * (g + 0.1 * w))


def test_closure_is_evaluated_with_grad_enabled():
    model = tiny_model()
    opt = LARS(param_groups(model, WD), lr=LR)

    def closure():
        opt.zero_grad()
        loss = loss_of(model)
        loss.backward()
        return loss

    before = model[0].weight.detach().clone()
    loss = opt.step(closure)
    assert torch.is_tensor(loss) and loss.requires_grad
    assert not torch.equal(model[0].weight.detach(), before)


# --- SGD when the trust ratio is 1 ---------------------------------------------------


def run_side_by_side(lars_model, lars, sgd_model, sgd, steps=3):
    for step in range(steps):
        for model, opt in ((lars_model, lars), (sgd_model, sgd)):
            opt.zero_grad()
            loss_of(model, step).backward()
            opt.step()
    for (name, a), b in zip(lars_model.named_parameters(), sgd_model.parameters()):
        assert_close(a, b, rtol=1e-12, atol=1e-12, msg=name)


@pytest.mark.parametrize("momentum,nesterov", [(0.0, False), (0.9, False), (0.9, True)])
def test_unadapted_group_is_torch_sgd(momentum, nesterov):
    a, b = tiny_model(), tiny_model()
    lars = LARS([{"params": a.parameters(), "weight_decay": 0.0}], lr=LR, momentum=momentum, nesterov=nesterov)
    sgd = torch.optim.SGD(b.parameters(), lr=LR, momentum=momentum, nesterov=nesterov)
    run_side_by_side(a, lars, b, sgd)


@pytest.mark.parametrize("momentum,nesterov", [(0.0, False), (0.9, False), (0.9, True)])
def test_clipped_ratio_of_one_is_torch_sgd_with_weight_decay(momentum, nesterov):
    # trust_coefficient=1 and a small lr: ratio / lr >> 1, so LARC clips the ratio to 1
    # and what is left is SGD's coupled weight decay.
    lr, wd = 1e-3, 5e-4
    a, b = tiny_model(), tiny_model()
    lars = LARS(a.parameters(), lr=lr, momentum=momentum, weight_decay=wd, trust_coefficient=1.0,
                nesterov=nesterov, trust_clip=True)
    sgd = torch.optim.SGD(b.parameters(), lr=lr, momentum=momentum, weight_decay=wd, nesterov=nesterov)
    run_side_by_side(a, lars, b, sgd)
    assert all(lars.state[p]["trust_ratio"].item() == 1.0 for p in a.parameters())


# --- excluding biases and normalization parameters -----------------------------------


def test_param_groups_split():
    model = nn.Sequential(
        nn.Embedding(10, 4), nn.Linear(4, 4), nn.LayerNorm(4), nn.BatchNorm1d(4),
        nn.GroupNorm(2, 4), nn.Linear(4, 4, bias=False),
    )
    model[5].weight = model[1].weight  # tied: must appear once
    model[1].bias.requires_grad_(False)  # frozen: left out
    decayed, not_decayed = param_groups(model, 0.05)
    assert decayed["weight_decay"] == 0.05 and not_decayed["weight_decay"] == 0.0
    ids = lambda ps: {id(p) for p in ps}  # noqa: E731
    assert ids(decayed["params"]) == ids([model[0].weight, model[1].weight])
    assert ids(not_decayed["params"]) == ids(
        [model[2].weight, model[2].bias, model[3].weight, model[3].bias, model[4].weight, model[4].bias]
    )
    assert len(decayed["params"]) == 2
    with pytest.raises(ValueError):
        param_groups(model, -1.0)


def test_norm_layer_parameters_stay_out_even_when_not_1d():
    norm = nn.LayerNorm((2, 3))  # its weight is 2-D
    groups = param_groups(nn.Sequential(nn.Linear(3, 3), norm), 0.1)
    assert any(p is norm.weight for p in groups[1]["params"])


def test_excluded_zero_bias_moves_like_sgd_but_an_adapted_one_freezes():
    # scaleDL_ghc19's lars.py bug (the seed talk's speaker's NCF notebook): LARS on a zero-initialized bias.
    excluded = tiny_model(zero_bias=True)
    opt = LARS(param_groups(excluded, WD), lr=LR, momentum=0.0, trust_coefficient=TC)
    _, grads = backward(excluded, opt)
    opt.step()
    assert_close(excluded[2].bias.detach(), -LR * grads["2.bias"])  # exactly SGD's step
    assert excluded[2].bias.abs().min() > 0

    adapted = tiny_model(zero_bias=True)
    opt = LARS(adapted.parameters(), lr=LR, momentum=0.0, weight_decay=WD, trust_coefficient=TC)
    for step in range(3):
        backward(adapted, opt, step)
        opt.step()
    # after the first step (ratio 1 by the zero-norm guard) the ratio is ~ TC * LR: frozen
    assert opt.state[adapted[2].bias]["trust_ratio"].item() < 5 * TC * LR


# --- mixed precision: unscale before LARS (apex#1030) --------------------------------


def amp_step(mode):
    model = tiny_model(dtype=torch.float32)
    opt = LARS(param_groups(model, WD), lr=LR, momentum=MOMENTUM, trust_coefficient=TC)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12)
    loss = loss_of(model)
    if mode == "fp32":
        loss.backward()
        opt.step()
    elif mode == "unscaled":
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        scaler.step(opt)
        scaler.update()
    else:  # "scaled": LARS sees gradients 4096 times too large
        scaler.scale(loss).backward()
        opt.step()
    params = [p.detach().clone() for p in model.parameters()]
    ratios = [opt.state[p]["trust_ratio"].clone() for p in model.parameters()]
    return params, ratios


def test_amp_unscaled_gradients_give_the_fp32_update():
    ref_params, ref_ratios = amp_step("fp32")
    params, ratios = amp_step("unscaled")
    assert_close(ratios, ref_ratios)
    assert_close(params, ref_params)


def test_amp_scaled_gradients_give_wrong_trust_ratios_and_update():
    ref_params, ref_ratios = amp_step("fp32")
    params, ratios = amp_step("scaled")
    weight_ratios = [(r, ref) for r, ref, p in zip(ratios, ref_ratios, ref_params) if p.ndim > 1]
    for r, ref in weight_ratios:
        assert r.item() < ref.item() / 100  # ||g|| is 4096x too large
    assert not all(torch.allclose(p, ref, rtol=1e-4, atol=1e-6) for p, ref in zip(params, ref_params))


# --- hyperparameter checks -----------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(lr=-0.1),
        dict(momentum=1.0),
        dict(momentum=-0.1),
        dict(weight_decay=-1e-4),
        dict(trust_coefficient=0.0),
        dict(eps=-1.0),
        dict(momentum=0.0, nesterov=True),
    ],
)
def test_bad_hyperparameters_are_refused(kwargs):
    kw = dict(lr=0.1)
    kw.update(kwargs)
    with pytest.raises(ValueError):
        LARS([nn.Parameter(torch.zeros(2))], **kw)


def test_bad_group_override_is_refused():
    with pytest.raises(ValueError, match="weight_decay"):
        LARS([{"params": [nn.Parameter(torch.zeros(2))], "weight_decay": -1.0}], lr=0.1)



@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("optimizer", ["lars", "lamb"])
def test_low_precision_parameters_follow_the_fp32_trajectory(dtype, optimizer):
    """LARS and LAMB on fp16/bf16 parameters (pure low-precision training, no fp32 master copy)
    take the steps an fp32 run from the same (rounded) start takes, to the low precision's
    rounding. 100 000 weights near 1: the sum of squares is past fp16's largest number (65504),
    so a norm accumulated in fp16 would be inf and every trust ratio 0 or NaN."""
    from course_lib.optim import LAMB

    g = torch.Generator().manual_seed(0)
    w0 = (1 + 0.1 * torch.randn(100_000, generator=g)).to(dtype)
    grads = [torch.randn(100_000, generator=g) for _ in range(3)]

    def run(dt):
        w = nn.Parameter(w0.clone().to(dt))
        opt = LARS([w], lr=20.0, momentum=0.9, weight_decay=1e-4) if optimizer == "lars" else \
            LAMB([w], lr=0.05, weight_decay=0.01)
        ratios = []
        for grad in grads:
            w.grad = grad.to(dt)
            opt.step()
            ratios.append(float(opt.state[w]["trust_ratio"]))
        return w.detach().float(), ratios

    (ref, ref_ratios), (low, low_ratios) = run(torch.float32), run(dtype)
    eps = torch.finfo(dtype).eps
    assert all(math.isfinite(r) and r > 0 for r in low_ratios)
    assert low_ratios == pytest.approx(ref_ratios, rel=10 * eps)
    moved = (ref - w0.float()).norm()
    assert moved / w0.float().norm() > 0.02  # steps large enough for a wrong ratio to show
    # the two trajectories differ by rounding (a few ulps per weight), not by a different step
    assert float((low - ref).norm() / moved) < 0.1, f"{optimizer} in {dtype}"
