"""LAMB (course_lib.optim.lamb): the equations, pre-normalization, bias correction, exclusion, state."""

import io
import math

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from course_lib.optim import LAMB, lamb_trust_ratio, param_groups

B1, B2, EPS = 0.9, 0.999, 1e-6


def tiny_model(zero_bias=False):
    """Linear(3, 4) -> tanh -> Linear(4, 2) in float64, the same weights on every call."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
    if zero_bias:
        with torch.no_grad():
            for layer in (model[0], model[2]):
                layer.bias.zero_()
    return model


def train(model, opt, steps, first=0):
    for step in range(first, first + steps):
        g = torch.Generator().manual_seed(100 + step)
        X = torch.randn(8, 3, generator=g, dtype=torch.float64)  # (B, in)
        y = torch.randn(8, 2, generator=g, dtype=torch.float64)  # (B, out)
        opt.zero_grad()
        nn.functional.mse_loss(model(X), y).backward()
        opt.step()


def t64(values):
    return torch.tensor(values, dtype=torch.float64)


# --- the trust ratio -----------------------------------------------------------------


def test_trust_ratio():
    assert lamb_trust_ratio(3.0, 1.5) == 2.0
    assert lamb_trust_ratio(3.0, 1.5, trust_clip=True) == 1.0
    assert lamb_trust_ratio(1.0, 4.0, trust_clip=True) == 0.25
    assert lamb_trust_ratio(0.0, 4.0) == 1.0  # zero-initialized weight
    assert lamb_trust_ratio(3.0, 0.0) == 1.0  # zero update
    ratio = lamb_trust_ratio(torch.tensor(3.0), torch.tensor(1.5))
    assert torch.is_tensor(ratio) and ratio.item() == 2.0


# --- the optimizer against its equations ------------------------------------------


def test_two_steps_match_the_equations_by_hand():
    lr, wd, max_grad_norm = 0.1, 0.1, 1.0
    W = nn.Parameter(t64([[1.0, -2.0], [0.5, 3.0]]))  # decayed and adapted
    b = nn.Parameter(t64([0.2, -0.1]))  # weight_decay=0: neither
    opt = LAMB(
        [{"params": [W], "weight_decay": wd}, {"params": [b], "weight_decay": 0.0}],
        lr=lr, betas=(B1, B2), eps=EPS, max_grad_norm=max_grad_norm,
    )
    # global norm 5 on step 1 (pre-normalized), 0.5 on step 2 (left alone); the
    # groups' own norms differ, so a per-group normalization would not pass.
    grads = [
        (t64([[3.0, 0.0], [0.0, 0.0]]), t64([4.0, 0.0])),
        (t64([[0.0, 0.3], [0.0, 0.0]]), t64([0.0, -0.4])),
    ]
    w = {"W": W.detach().clone(), "b": b.detach().clone()}
    m = {"W": torch.zeros_like(W), "b": torch.zeros_like(b)}
    v = {"W": torch.zeros_like(W), "b": torch.zeros_like(b)}
    decay = {"W": wd, "b": 0.0}
    for t, (gW, gb) in enumerate(grads, start=1):
        W.grad, b.grad = gW.clone(), gb.clone()
        opt.step()
        global_norm = math.sqrt(gW.pow(2).sum() + gb.pow(2).sum())
        divisor = max(1.0, global_norm / max_grad_norm)
        for name, g in (("W", gW), ("b", gb)):
            g = g / divisor
            m[name] = B1 * m[name] + (1 - B1) * g
            v[name] = B2 * v[name] + (1 - B2) * g * g
            m_hat = m[name] / (1 - B1**t)
            v_hat = v[name] / (1 - B2**t)
            update = m_hat / (v_hat.sqrt() + EPS) + decay[name] * w[name]
            ratio = w[name].norm() / update.norm() if decay[name] else t64(1.0)
            w[name] = w[name] - lr * ratio * update
            p = W if name == "W" else b
            assert_close(p.detach(), w[name], rtol=1e-12, atol=1e-12, msg=f"{name} at step {t}")
            assert_close(opt.state[p]["trust_ratio"], ratio.float())
            assert opt.state[p]["step"] == t


@pytest.mark.parametrize(
    "bias_correction,grad_averaging,expected",
    [
        # first step, g = 2, v = (1 - B2) g^2 in every case
        (True, True, 2.0 / (2.0 + EPS)),  # m_hat = g, sqrt(v_hat) = |g|: Adam's first step
        (False, True, (1 - B1) * 2.0 / (math.sqrt(1 - B2) * 2.0 + EPS)),  # ~ 3.16
        (True, False, (2.0 / (1 - B1)) / (2.0 + EPS)),  # m = g, m_hat = g / (1 - B1)
        (False, False, 2.0 / (math.sqrt(1 - B2) * 2.0 + EPS)),
    ],
)
def test_first_step_bias_correction_and_grad_averaging(bias_correction, grad_averaging, expected):
    p = nn.Parameter(t64([1.0]))
    p.grad = t64([2.0])
    LAMB([p], lr=0.1, weight_decay=0.0, max_grad_norm=None,
         bias_correction=bias_correction, grad_averaging=grad_averaging).step()
    assert p.item() == pytest.approx(1.0 - 0.1 * expected, rel=1e-12)


def test_always_adapt_applies_the_trust_ratio_at_zero_weight_decay():
    """First step, one parameter w = (3, 4), g = (1, 1): the update is g / (|g| + eps) (Adam's
    first step), the ratio ||w|| / ||update||, so the step moves w by exactly lr * ||w||."""
    lr = 0.1
    for always_adapt in (True, False):
        p = nn.Parameter(t64([3.0, 4.0]))
        p.grad = t64([1.0, 1.0])
        opt = LAMB([p], lr=lr, weight_decay=0.0, max_grad_norm=None, always_adapt=always_adapt)
        opt.step()
        update = t64([1.0, 1.0]) / (1.0 + EPS)
        ratio = 5.0 / update.norm().item() if always_adapt else 1.0
        assert_close(p.detach(), t64([3.0, 4.0]) - lr * ratio * update, rtol=1e-12, atol=1e-12)
        assert opt.state[p]["trust_ratio"].item() == pytest.approx(ratio, rel=1e-6)
        moved = (p.detach() - t64([3.0, 4.0])).norm().item()
        assert moved == pytest.approx(lr * 5.0 if always_adapt else lr * update.norm().item(), rel=1e-12)


def test_trust_clip_caps_the_ratio_at_one_and_leaves_smaller_ratios_alone():
    """trust_clip (timm): min(ratio, 1). With g = (1, 1) on the first step ||update|| ~ sqrt(2):
    w = (3, 4) has ratio 5 / sqrt(2) > 1 (clipped: a plain Adam step), w = (0.3, 0.4) has 0.5 / sqrt(2)."""
    lr = 0.1
    big, small = nn.Parameter(t64([3.0, 4.0])), nn.Parameter(t64([0.3, 0.4]))
    for p in (big, small):
        p.grad = t64([1.0, 1.0])
    opt = LAMB([big, small], lr=lr, weight_decay=0.0, max_grad_norm=None, always_adapt=True, trust_clip=True)
    opt.step()
    update = t64([1.0, 1.0]) / (1.0 + EPS)
    small_ratio = 0.5 / update.norm().item()
    assert_close(big.detach(), t64([3.0, 4.0]) - lr * update, rtol=1e-12, atol=1e-12)
    assert_close(small.detach(), t64([0.3, 0.4]) - lr * small_ratio * update, rtol=1e-12, atol=1e-12)
    assert opt.state[big]["trust_ratio"].item() == 1.0
    assert opt.state[small]["trust_ratio"].item() == pytest.approx(small_ratio, rel=1e-6)


def test_without_weight_decay_or_prenormalization_it_is_torch_adam():
    a, b = tiny_model(), tiny_model()
    lamb = LAMB(a.parameters(), lr=0.01, betas=(B1, B2), eps=EPS, weight_decay=0.0, max_grad_norm=None)
    adam = torch.optim.Adam(b.parameters(), lr=0.01, betas=(B1, B2), eps=EPS)
    train(a, lamb, 3)
    train(b, adam, 3)
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert_close(pa, pb, rtol=1e-12, atol=1e-12)


# --- global gradient pre-normalization -----------------------------------------------


def two_steps(second_grad_scale, max_grad_norm):
    p = nn.Parameter(t64([1.0, -1.0, 2.0]))
    opt = LAMB([p], lr=0.1, weight_decay=0.01, max_grad_norm=max_grad_norm)
    for g in (t64([3.0, 1.0, -2.0]), second_grad_scale * t64([-1.0, 2.0, 2.0])):  # norms 3.7 and 3
        p.grad = g
        opt.step()
    return p.detach().clone()


def test_prenormalization_makes_a_huge_gradient_harmless():
    # Both gradients have norm > max_grad_norm, so both are scaled to norm 1: a
    # 1000x larger second gradient changes nothing.
    assert_close(two_steps(1000.0, max_grad_norm=1.0), two_steps(1.0, max_grad_norm=1.0))


@pytest.mark.parametrize("off", [None, 0.0])
def test_without_prenormalization_a_huge_gradient_takes_over(off):
    # The huge gradient dominates m and v: the second step points along it.
    assert not torch.allclose(two_steps(1000.0, max_grad_norm=off), two_steps(1.0, max_grad_norm=off), rtol=1e-3)


def test_prenormalization_leaves_small_gradients_alone():
    small = {}
    for max_grad_norm in (None, 100.0):
        model = tiny_model()
        train(model, LAMB(param_groups(model, 0.01), lr=0.01, max_grad_norm=max_grad_norm), 2)
        small[max_grad_norm] = [p.detach() for p in model.parameters()]
    assert_close(small[100.0], small[None], rtol=0, atol=0)


def test_prenormalization_does_not_touch_p_grad():
    p = nn.Parameter(t64([1.0, 2.0]))
    p.grad = t64([30.0, 40.0])
    LAMB([p], lr=0.1).step()
    assert_close(p.grad, t64([30.0, 40.0]))


# --- excluding biases and normalization parameters -----------------------------------


def test_excluded_zero_bias_moves_like_adam_and_is_not_adapted():
    lr = 0.01
    model = tiny_model(zero_bias=True)
    opt = LAMB(param_groups(model, 0.01), lr=lr, max_grad_norm=None)
    train(model, opt, 1)
    bias = model[2].bias
    g = bias.grad
    # first Adam step: m_hat = g, sqrt(v_hat) = |g|
    assert_close(bias.detach(), -lr * g / (g.abs() + EPS))
    assert opt.state[bias]["trust_ratio"].item() == 1.0
    assert opt.state[model[2].weight]["trust_ratio"].item() != 1.0


def test_adapted_zero_bias_freezes():
    # Why param_groups matters for LAMB too: once a zero-initialized bias has moved,
    # its trust ratio is ||w|| / ||update|| ~ lr, so it crawls.
    lr = 0.01
    model = tiny_model(zero_bias=True)
    opt = LAMB(model.parameters(), lr=lr, weight_decay=0.01)
    train(model, opt, 3)
    assert opt.state[model[2].bias]["trust_ratio"].item() < 5 * lr


# --- state dict ----------------------------------------------------------------------


def test_state_dict_round_trip():
    a = tiny_model()
    opt_a = LAMB(param_groups(a, 0.01), lr=0.01, max_grad_norm=0.5)
    train(a, opt_a, 3)
    saved = io.BytesIO()
    torch.save({"model": a.state_dict(), "optimizer": opt_a.state_dict()}, saved)

    saved.seek(0)
    checkpoint = torch.load(saved)
    b = tiny_model()
    opt_b = LAMB(param_groups(b, 0.01), lr=0.01, max_grad_norm=0.5)
    b.load_state_dict(checkpoint["model"])
    opt_b.load_state_dict(checkpoint["optimizer"])

    train(a, opt_a, 2, first=3)
    train(b, opt_b, 2, first=3)
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert_close(pa, pb, rtol=0, atol=0)
        assert opt_b.state[pb]["step"] == 5
        assert_close(opt_b.state[pb]["exp_avg"], opt_a.state[pa]["exp_avg"], rtol=0, atol=0)


# --- hyperparameter checks -----------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(lr=-0.1),
        dict(betas=(1.0, 0.999)),
        dict(betas=(0.9, -0.1)),
        dict(betas=(0.9,)),
        dict(eps=-1e-6),
        dict(weight_decay=-0.01),
        dict(max_grad_norm=-1.0),
    ],
)
def test_bad_hyperparameters_are_refused(kwargs):
    kw = dict(lr=0.1)
    kw.update(kwargs)
    with pytest.raises(ValueError):
        LAMB([nn.Parameter(torch.zeros(2))], **kw)


def test_max_grad_norm_is_one_setting_for_all_groups():
    with pytest.raises(ValueError, match="max_grad_norm"):
        LAMB([{"params": [nn.Parameter(torch.zeros(2))], "max_grad_norm": 5.0}], lr=0.1)
