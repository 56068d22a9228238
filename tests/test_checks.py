"""course_lib.checks: a correct answer passes, a stub is "not implemented yet", and each
classic mistake fails with a message that names it.

The lesson-06 implementations live at module level because the checks run them in
spawned workers, which import them by module and name (this file is importable as
``test_checks``: pytest puts tests/ on sys.path). Only two tests launch processes.
"""

import math

import pytest
import torch
import torch.distributed as dist

from course_lib import checks
from course_lib.checks import l06_allreduce as l06
from course_lib.metrics import positive_rank
from course_lib.optim import LAMB, LARS, lars_trust_ratio
from _timing import scaled


@pytest.fixture(autouse=True)
def lenient(monkeypatch):
    monkeypatch.delenv(checks.STRICT_ENV, raising=False)


def _stub(*args, **kwargs):
    raise NotImplementedError()


# --------------------------------------------------------------------------- implementations: 01-04


def hit_rate_ok(scores, k):
    rank = (scores[:, 1:] >= scores[:, :1]).sum(1)
    return (rank < k).float().mean().item()


def ndcg_ok(scores, k):
    rank = (scores[:, 1:] >= scores[:, :1]).sum(1).double()
    return torch.where(rank < k, 1 / torch.log2(rank + 2), torch.zeros_like(rank)).mean().item()


def ndcg_natural_log(scores, k):
    rank = (scores[:, 1:] >= scores[:, :1]).sum(1).double()
    return torch.where(rank < k, 1 / torch.log(rank + 2), torch.zeros_like(rank)).mean().item()


def hit_rate_optimistic_ties(scores, k):
    rank = (scores[:, 1:] > scores[:, :1]).sum(1)
    return (rank < k).float().mean().item()


def hit_rate_ignores_k(scores, k):
    return hit_rate_ok(scores, 10)


def ndcg_ignores_k(scores, k):
    return ndcg_ok(scores, 10)


def linear_ok(base_lr, batch_size, base_batch_size):
    return base_lr * batch_size / base_batch_size


def sqrt_ok(base_lr, batch_size, base_batch_size):
    return base_lr * math.sqrt(batch_size / base_batch_size)


def linear_base_256(base_lr, batch_size, base_batch_size):
    return base_lr * batch_size / 256


def warmup_ok(step, warmup_steps, total_steps, decay="constant"):
    if step < warmup_steps:
        return step / warmup_steps
    if decay == "constant" or total_steps == warmup_steps:
        return 1.0 if decay == "constant" or step <= warmup_steps else 0.0
    progress = min(1.0, (step - warmup_steps) / (total_steps - warmup_steps))
    return 0.5 * (1 + math.cos(math.pi * progress))


def warmup_one_step_ahead(step, warmup_steps, total_steps, decay="constant"):
    return warmup_ok(step + 1, warmup_steps, total_steps, decay)


def trust_ratio_ok(w_norm, g_norm, trust_coefficient, weight_decay, eps):
    if w_norm == 0 or g_norm == 0:
        return 1.0
    return trust_coefficient * w_norm / (g_norm + weight_decay * w_norm + eps)


def trust_ratio_unguarded(w_norm, g_norm, trust_coefficient, weight_decay, eps):
    return trust_coefficient * w_norm / (g_norm + weight_decay * w_norm + eps)


def trust_ratio_without_eps(w_norm, g_norm, trust_coefficient, weight_decay, eps):
    return trust_ratio_ok(w_norm, g_norm, trust_coefficient, weight_decay, 0.0)


def trust_ratio_eps_1e_8(w_norm, g_norm, trust_coefficient, weight_decay, eps):
    return trust_ratio_ok(w_norm, g_norm, trust_coefficient, weight_decay, 1e-8)


def _lars_step(groups, state, guard=True, **fixed):
    """A LARS step; ``fixed`` hard-codes hyperparameters (a learner's mistake) instead of reading the group."""
    for group in groups:
        group = {**group, **{k: v for k, v in fixed.items() if k != "weight_decay" or group["weight_decay"]}}
        if fixed.get("first_group_lr"):
            group["lr"] = groups[0]["lr"]
        for p in group["params"]:
            g = p.grad
            if group["weight_decay"] != 0:
                w_norm, g_norm = p.norm().item(), g.norm().item()
                ratio_fn = trust_ratio_ok if guard else trust_ratio_unguarded
                ratio = ratio_fn(w_norm, g_norm, group["trust_coefficient"], group["weight_decay"], group["eps"])
                g = (g + group["weight_decay"] * p) * ratio
            if group["momentum"]:
                buf = state[p].get("momentum_buffer")
                buf = g.clone() if buf is None else buf.mul_(group["momentum"]).add_(g)
                state[p]["momentum_buffer"] = g = buf
            p.add_(g, alpha=-group["lr"])


def lars_step_ok(groups, state):
    _lars_step(groups, state)


def lars_step_without_zero_norm_guard(groups, state):
    _lars_step(groups, state, guard=False)


def lars_step_ignores_lr(groups, state):  # what this catches: every case used lr=1
    _lars_step(groups, state, lr=1.0)


def lars_step_first_group_lr(groups, state):
    _lars_step(groups, state, first_group_lr=True)


def lars_step_momentum_0_9(groups, state):
    _lars_step(groups, state, momentum=0.9)


def lars_step_trust_coefficient_0_02(groups, state):
    _lars_step(groups, state, trust_coefficient=0.02)


def lars_step_weight_decay_5e_4(groups, state):
    _lars_step(groups, state, weight_decay=5e-4)


def lars_step_eps_1e_8(groups, state):
    _lars_step(groups, state, eps=1e-8)


# --------------------------------------------------------------------------- 05: loss scaler


class LossScalerOK:
    def __init__(self, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000,
                 skip_step=True):
        self.scale_value, self.growth_factor, self.backoff_factor = init_scale, growth_factor, backoff_factor
        self.growth_interval, self.clean_steps, self.found_inf, self.skip_step = growth_interval, 0, False, skip_step

    def get_scale(self):
        return self.scale_value

    def scale(self, loss):
        return loss * self.scale_value

    def step(self, optimizer):
        grads = [p.grad for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        for g in grads:
            g.div_(self.scale_value)
        self.found_inf = not all(torch.isfinite(g).all() for g in grads)
        if not self.found_inf or not self.skip_step:
            optimizer.step()

    def update(self):
        if self.found_inf:
            self.scale_value *= self.backoff_factor
            self.clean_steps = 0
        else:
            self.clean_steps += 1
            if self.clean_steps == self.growth_interval:
                self.scale_value *= self.growth_factor
                self.clean_steps = 0


class LossScalerNoSkip(LossScalerOK):
    def __init__(self, **kwargs):
        super().__init__(**kwargs, skip_step=False)


class LossScalerFixedFactors(LossScalerOK):
    """Doubles and halves, whatever growth_factor and backoff_factor it is given."""

    def __init__(self, **kwargs):
        super().__init__(**{**kwargs, "growth_factor": 2.0, "backoff_factor": 0.5})


class LossScalerInfOnly(LossScalerOK):
    """Looks for inf only (``~isinf`` in place of ``isfinite``): steps on NaN gradients."""

    def step(self, optimizer):
        grads = [p.grad for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        for g in grads:
            g.div_(self.scale_value)
        self.found_inf = any(torch.isinf(g).any() for g in grads)
        if not self.found_inf:
            optimizer.step()


class StubScaler:
    def __init__(self, **kwargs):
        raise NotImplementedError()


# --------------------------------------------------------------------------- 06: run in spawned workers


def average_gradients_ok(model):
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()


def average_gradients_sums(model):
    for p in model.parameters():
        dist.all_reduce(p.grad)


def average_gradients_halves(model):  # what this catches: the world size was always 2
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= 2


def _ring(tensor, even_chunks_only):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    flat = tensor.view(-1)
    if even_chunks_only:  # the classic bug: n // world_size per chunk, the remainder forgotten
        c = flat.numel() // world_size
        chunks = [flat[i * c:(i + 1) * c] for i in range(world_size)]
    else:
        chunks = list(torch.tensor_split(flat, world_size))
    right, left = (rank + 1) % world_size, (rank - 1) % world_size

    def exchange(send_idx, recv_idx):
        buf = torch.empty_like(chunks[recv_idx])
        for req in (dist.isend(chunks[send_idx].clone(), right), dist.irecv(buf, left)):
            req.wait()
        return buf

    for s in range(world_size - 1):  # reduce-scatter
        recv_idx = (rank - s - 1) % world_size
        chunks[recv_idx] += exchange((rank - s) % world_size, recv_idx)
    for s in range(world_size - 1):  # all-gather
        recv_idx = (rank - s) % world_size
        chunks[recv_idx].copy_(exchange((rank + 1 - s) % world_size, recv_idx))


def ring_ok(tensor):
    _ring(tensor, even_chunks_only=False)


def ring_even_chunks_only(tensor):
    _ring(tensor, even_chunks_only=True)


def ring_by_all_reduce(tensor):  # right numbers, but not built from point-to-point messages
    dist.all_reduce(tensor)


# --------------------------------------------------------------------------- 08: broadcast trees


def _binomial(tensor, src):
    rank, p = dist.get_rank(), dist.get_world_size()
    me = (rank - src) % p  # rank relative to the root
    mask = 1
    while mask < p:  # receive from the parent: the rank that differs in my lowest set bit
        if me & mask:
            dist.recv(tensor, (me - mask + src) % p)
            break
        mask <<= 1
    mask >>= 1
    while mask:  # then send to my children, farthest first
        if me + mask < p:
            dist.send(tensor, (me + mask + src) % p)
        mask >>= 1


def bcast_ok(tensor, src=0):
    _binomial(tensor, src)


def bcast_flat_tree(tensor, src=0):
    rank, p = dist.get_rank(), dist.get_world_size()
    if rank == src:
        for r in range(p):
            if r != src:
                dist.send(tensor, r)
    else:
        dist.recv(tensor, src)


def bcast_chain(tensor, src=0):
    rank, p = dist.get_rank(), dist.get_world_size()
    me = (rank - src) % p
    if me:
        dist.recv(tensor, (rank - 1) % p)
    if me < p - 1:
        dist.send(tensor, (rank + 1) % p)


def bcast_with_the_collective(tensor, src=0):
    dist.broadcast(tensor, src)


def bcast_into_a_copy(tensor, src=0):
    out = tensor.clone()
    _binomial(out, src)
    return out


# --------------------------------------------------------------------------- 07: LAMB


def _lamb_step(groups, state, max_grad_norm, bias_correction=True, **fixed):
    """A LAMB step; ``fixed`` hard-codes hyperparameters (a learner's mistake) instead of reading the group."""
    grads = [p.grad for g in groups for p in g["params"]]
    divisor = max(1.0, torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])).item() / max_grad_norm)
    for group in groups:
        group = {**group, **{k: v for k, v in fixed.items() if k != "weight_decay" or group["weight_decay"]}}
        beta1, beta2 = group["betas"]
        for p in group["params"]:
            g = p.grad / divisor
            st = state[p]
            if not st:
                st.update(step=0, exp_avg=torch.zeros_like(p), exp_avg_sq=torch.zeros_like(p))
            st["step"] += 1
            t = st["step"]
            st["exp_avg"].mul_(beta1).add_(g, alpha=1 - beta1)
            st["exp_avg_sq"].mul_(beta2).addcmul_(g, g, value=1 - beta2)
            m, v = st["exp_avg"], st["exp_avg_sq"]
            if bias_correction:
                m, v = m / (1 - beta1**t), v / (1 - beta2**t)
            update = m / (v.sqrt() + group["eps"]) + group["weight_decay"] * p
            ratio = 1.0
            if group["weight_decay"] != 0:
                w_norm, u_norm = p.norm().item(), update.norm().item()
                ratio = w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0
            p.add_(update, alpha=-group["lr"] * ratio)


def lamb_step_ok(groups, state, max_grad_norm):
    _lamb_step(groups, state, max_grad_norm)


def lamb_step_without_bias_correction(groups, state, max_grad_norm):
    _lamb_step(groups, state, max_grad_norm, bias_correction=False)


def lamb_step_ignores_lr(groups, state, max_grad_norm):
    _lamb_step(groups, state, max_grad_norm, lr=0.01)


def lamb_step_betas_0_9_0_999(groups, state, max_grad_norm):
    _lamb_step(groups, state, max_grad_norm, betas=(0.9, 0.999))


def lamb_step_eps_1e_6(groups, state, max_grad_norm):
    _lamb_step(groups, state, max_grad_norm, eps=1e-6)


def lamb_step_weight_decay_0_01(groups, state, max_grad_norm):
    _lamb_step(groups, state, max_grad_norm, weight_decay=0.01)


def lamb_step_max_grad_norm_1(groups, state, max_grad_norm):
    _lamb_step(groups, state, 1.0)


# --------------------------------------------------------------------------- tests

IN_PROCESS = [  # (check, correct implementation)
    (checks.check_hit_rate, hit_rate_ok),
    (checks.check_ndcg, ndcg_ok),
    (checks.check_linear_scaled_lr, linear_ok),
    (checks.check_sqrt_scaled_lr, sqrt_ok),
    (checks.check_warmup_factor, warmup_ok),
    (checks.check_lars_trust_ratio, trust_ratio_ok),
    (checks.check_lars_step, lars_step_ok),
    (checks.check_loss_scaler, LossScalerOK),
    (checks.check_lamb_step, lamb_step_ok),
]


@pytest.mark.parametrize("check, impl", IN_PROCESS, ids=[c.__name__ for c, _ in IN_PROCESS])
def test_a_correct_implementation_passes(check, impl):
    result = check(impl)
    assert result.passed, result.message
    assert result and "PASS" in repr(result) and "PASS" in result._repr_html_()
    assert len(result.cases) >= 3, "every check runs several cases"


WRONG = [  # (check, subtly wrong implementation, words the message must contain)
    (checks.check_ndcg, ndcg_natural_log, ["natural log", "log2"]),
    (checks.check_hit_rate, hit_rate_optimistic_ties, ["ties", "expected 0, got 1"]),
    (checks.check_sqrt_scaled_lr, linear_ok, ["linear rule", "sqrt"]),
    (checks.check_linear_scaled_lr, sqrt_ok, ["square-root rule"]),
    (checks.check_warmup_factor, warmup_one_step_ahead, ["one step ahead", "at step 0 expected 0, got 0.2"]),
    (checks.check_lars_trust_ratio, trust_ratio_unguarded, ["zero norm", "zero-norm guard", "expected 1,"]),
    (checks.check_lars_step, lars_step_without_zero_norm_guard, ["zero-initialized weight", "zero-norm guard",
                                                                 "'3.weight'"]),
    (checks.check_loss_scaler, LossScalerNoSkip, ["step 3 (inf gradients)", "SKIPPED"]),
    (checks.check_lamb_step, lamb_step_without_bias_correction, ["without bias correction", "after step 1"]),
]

# Hard-coded hyperparameters: each passed the checks while every case used the same
# value (lr=1, k=10, growth x2 ...); now a case varies it. The messages name the case that differs.
HARD_CODED = [  # (check, implementation, words the message must contain)
    (checks.check_hit_rate, hit_rate_ignores_k, ["k=1", "use the k you are given"]),
    (checks.check_ndcg, ndcg_ignores_k, ["k=1", "use the k you are given"]),
    (checks.check_linear_scaled_lr, linear_base_256, ["base_batch_size=1024"]),
    (checks.check_lars_trust_ratio, trust_ratio_without_eps, ["||g||=0.0001", "expected 6.9993, got 7"]),
    (checks.check_lars_trust_ratio, trust_ratio_eps_1e_8, ["||w||=2, ||g||=1"]),
    (checks.check_lars_step, lars_step_ignores_lr, ["lr=0.3", "ignores the group's lr"]),
    (checks.check_lars_step, lars_step_first_group_lr, ["a different lr in each group", "first group's lr"]),
    (checks.check_lars_step, lars_step_momentum_0_9, ["momentum=0"]),
    (checks.check_lars_step, lars_step_trust_coefficient_0_02, ["trust_coefficient=0.001"]),
    (checks.check_lars_step, lars_step_weight_decay_5e_4, ["weight_decay=0.05"]),
    (checks.check_lars_step, lars_step_eps_1e_8, ["eps=0.01"]),
    (checks.check_loss_scaler, LossScalerFixedFactors, ["growth_factor=4", "backoff_factor=0.25"]),
    (checks.check_loss_scaler, LossScalerInfOnly, ["(nan gradients)", "SKIPPED"]),
    (checks.check_lamb_step, lamb_step_ignores_lr, ["lr=0.05"]),
    (checks.check_lamb_step, lamb_step_betas_0_9_0_999, ["betas=(0.8, 0.99)"]),
    (checks.check_lamb_step, lamb_step_eps_1e_6, ["eps=0.01"]),
    (checks.check_lamb_step, lamb_step_weight_decay_0_01, ["weight_decay=0.1"]),
    (checks.check_lamb_step, lamb_step_max_grad_norm_1, ["max_grad_norm=5", "uses max_grad_norm=1"]),
]
WRONG += HARD_CODED


@pytest.mark.parametrize("check, impl, words", WRONG, ids=[f"{c.__name__}-{i.__name__}" for c, i, _ in WRONG])
def test_a_classic_mistake_fails_and_is_named(check, impl, words):
    result = check(impl)
    assert not result.passed and not result.not_implemented
    assert "case '" in result.message  # which case differs
    for word in words:
        assert word in result.message, result.message
    assert "FAIL" in repr(result) and "FAIL" in result._repr_html_()


def test_the_references_behind_the_checks_are_the_course_code(monkeypatch):
    # The messages above only mean something if the checks compare with course_lib itself.
    from course_lib import metrics
    from course_lib.checks import l01_metrics, l04_lars, l07_lamb

    assert lars_trust_ratio(0.0, 1.0, trust_coefficient=0.001, weight_decay=0.0, eps=1e-8) == 1.0
    assert positive_rank(torch.zeros(1, 3)).item() == 2
    assert l04_lars.LARS is LARS and l04_lars.lars_trust_ratio is lars_trust_ratio and l07_lamb.LAMB is LAMB
    assert l01_metrics.hit_rate_at_k is metrics.hit_rate_at_k and l01_metrics.ndcg_at_k is metrics.ndcg_at_k
    # and a change of the reference changes the verdict: with LARS adapting every group, the
    # correct step no longer matches
    monkeypatch.setattr(l04_lars, "LARS", lambda groups, **kw: LARS(groups, **{**kw, "always_adapt": True}))
    assert not checks.check_lars_step(lars_step_ok).passed


def test_a_learner_error_is_reported_not_raised():
    def broken(scores, k):
        return scores.nonexistent_method()

    result = checks.check_hit_rate(broken)
    assert not result.passed
    assert "AttributeError" in result.message and "nonexistent_method" in result.message


def test_a_function_defined_in_the_notebook_is_refused_with_the_reason():
    def ring(tensor):  # stands in for a function typed into a notebook cell
        pass

    ring.__module__ = "__main__"
    result = checks.check_ring_all_reduce(ring)
    assert not result.passed and "spawn" in result.message and "%%writefile" in result.message


def test_strict_mode_raises_on_failure_and_on_a_stub(monkeypatch):
    monkeypatch.setenv(checks.STRICT_ENV, "1")
    with pytest.raises(checks.CheckFailed, match="natural log"):
        checks.check_ndcg(ndcg_natural_log)
    with pytest.raises(checks.CheckFailed, match="not implemented yet"):
        checks.check_ndcg(_stub)
    assert checks.check_ndcg(ndcg_ok).passed  # a pass never raises


def test_gradient_averaging_check_against_ddp():
    # One launch (3 ranks: odd, so dividing by a fixed 2 shows) checks all three implementations.
    fns = [average_gradients_ok, average_gradients_sums, average_gradients_halves]
    per_rank = l06.launch_cases("check_average_gradients", l06._grad_avg_worker, fns, 3, True,
                                 timeout_s=scaled(600))
    assert isinstance(per_rank, list), per_rank
    ok, summed, halved = (l06._grad_avg_result("check_average_gradients", [r[i] for r in per_rank], 3, True)
                          for i in range(len(fns)))
    assert ok.passed, ok.message
    assert not summed.passed
    assert "3 times DDP's gradient" in summed.message and "SUMs" in summed.message, summed.message
    assert not halved.passed
    assert "divided by 2, not by the world size (3)" in halved.message, halved.message


def test_the_gradient_averaging_check_runs_an_odd_world_size_by_default():
    import inspect

    assert inspect.signature(checks.check_average_gradients).parameters["world_size"].default == 3


def test_ring_all_reduce_check_on_three_ranks():
    # One launch (3 ranks): a correct ring, and one that drops the remainder of uneven chunks.
    sizes = checks.ring_sizes(3)
    assert {1, 2, 4, 1001, (4, 3)} <= set(sizes)  # shorter than, and not divisible by, world_size; 2-D
    # And one that gets the right numbers from dist.all_reduce itself: refused, by name.
    per_rank = l06.launch_cases("check_ring_all_reduce", l06._ring_worker,
                                    [ring_ok, ring_even_chunks_only, ring_by_all_reduce], 3, sizes,
                                    timeout_s=scaled(600))
    assert isinstance(per_rank, list), per_rank
    ok = l06._ring_result("check_ring_all_reduce", [r[0] for r in per_rank], 3, sizes)
    assert ok.passed, ok.message
    uneven = l06._ring_result("check_ring_all_reduce", [r[1] for r in per_rank], 3, sizes)
    assert not uneven.passed
    assert "shape (1,) on 3 ranks" in uneven.message and "tensor_split" in uneven.message, uneven.message
    collective = l06._ring_result("check_ring_all_reduce", [r[2] for r in per_rank], 3, sizes)
    assert not collective.passed
    assert "called dist.all_reduce, a collective" in collective.message, collective.message
    assert dist.all_reduce.__module__.startswith("torch.distributed")  # the refusal was undone here too


def test_the_ring_check_refuses_collectives_imported_by_name_and_restores_them():
    namespace = {"all_gather": dist.all_gather}
    exec("def ring(t):\n    all_gather([t], t)\n", namespace)
    originals = {name: getattr(dist, name) for name in l06._COLLECTIVES if hasattr(dist, name)}
    log = l06._CallLog(namespace["ring"])
    with log, pytest.raises(RuntimeError, match="all_gather is a collective"):
        namespace["ring"](torch.zeros(2))
    assert log.collectives == ["all_gather"]
    assert namespace["all_gather"] is originals["all_gather"]
    assert all(getattr(dist, name) is fn for name, fn in originals.items())


def test_binomial_broadcast_check_on_four_ranks():
    # One launch (4 ranks, where a flat tree and a chain give themselves away): five implementations.
    from course_lib.checks import l08_collectives as l08

    cases = l08.broadcast_cases(4)
    assert {(1,), (3,), (5,), (7, 3)} <= {c[0] for c in cases} and {c[1] for c in cases} == set(l08.DTYPES)
    fns = [bcast_ok, bcast_flat_tree, bcast_chain, bcast_with_the_collective, bcast_into_a_copy]
    per_rank = l06.launch_cases("check_binomial_tree_broadcast", l08._bcast_worker, fns, 4, cases)
    assert isinstance(per_rank, list), per_rank

    def judged(i):
        return l08._judge("check_binomial_tree_broadcast", {4: [r[i] for r in per_rank]}, {4: cases})

    ok = judged(0)
    assert ok.passed, ok.message
    messages = {fn.__name__: judged(i).message for i, fn in enumerate(fns) if i}
    assert not any(judged(i).passed for i in range(1, len(fns)))
    assert "flat tree" in messages["bcast_flat_tree"] and "sent to 3 ranks" in messages["bcast_flat_tree"]
    assert "chain" in messages["bcast_chain"] and "3 hops" in messages["bcast_chain"]
    assert "dist.broadcast" in messages["bcast_with_the_collective"]
    assert "in place" in messages["bcast_into_a_copy"]



# --------------------------------------------------------------------------- 10: Megatron's f


def test_copy_to_parallel_check_tells_right_from_three_mistakes():
    # One launch of 3 ranks (out_features 7 and 5 split unevenly): the answer and three classic mistakes.
    import _dist_workers as w
    from course_lib.checks import l10_tensor_parallel as l10

    fns = [w.GoodCopyToParallel, w.NoAllReduce, w.AllReduceForward, w.AveragedBackward]
    per_rank = l06.launch_cases("check_copy_to_parallel", l10._column_worker, fns, 3, l10.CASES,
                                 timeout_s=scaled(300))
    assert isinstance(per_rank, list), per_rank
    problems = [[p for r in per_rank for p in r[i]] for i in range(len(fns))]
    assert problems[0] == [], problems[0]
    assert all(problems[1:])
    assert "add them up over every rank" in problems[1][0] and "dL/dx differs" in problems[1][0]
    assert "output differs" in problems[2][0] and "belongs in backward" in problems[2][0]
    assert "1/W" in problems[3][0]


# --------------------------------------------------------------------------- 11: the noise scale


def _noise_scale_right(sq_small, sq_big, b_small, b_big):
    g2 = [(b_big * b - b_small * s) / (b_big - b_small) for s, b in zip(sq_small, sq_big)]
    tr = [(s - b) / (1 / b_small - 1 / b_big) for s, b in zip(sq_small, sq_big)]
    g2, tr = sum(g2) / len(g2), sum(tr) / len(tr)
    return tr / g2, g2, tr


def _noise_scale_mean_of_ratios(sq_small, sq_big, b_small, b_big):
    per = [_noise_scale_right([s], [b], b_small, b_big) for s, b in zip(sq_small, sq_big)]
    return sum(p[0] for p in per) / len(per), sum(p[1] for p in per) / len(per), sum(p[2] for p in per) / len(per)


def _noise_scale_no_denominator(sq_small, sq_big, b_small, b_big):
    b, g2, _ = _noise_scale_right(sq_small, sq_big, b_small, b_big)
    tr = sum(s - b for s, b in zip(sq_small, sq_big)) / len(sq_small)
    return tr / g2, g2, tr


def test_noise_scale_check_tells_right_from_three_mistakes():
    assert checks.check_noise_scale(_noise_scale_right).passed
    r = checks.check_noise_scale(_noise_scale_mean_of_ratios)
    assert not r.passed and "averaged the ratio" in r.message
    r = checks.check_noise_scale(_noise_scale_no_denominator)
    assert not r.passed and "(1/b_small - 1/b_big)" in r.message
    r = checks.check_noise_scale(lambda s, b, b_small, b_big: _noise_scale_right(s, b, b_big, b_small))
    assert not r.passed and "swapped" in r.message


def test_noise_scale_check_reports_a_stub_and_a_wrong_shape():
    def stub(*args):
        raise NotImplementedError()

    assert checks.check_noise_scale(stub).not_implemented
    r = checks.check_noise_scale(lambda *a: 1.0)
    assert not r.passed and "three numbers" in r.message


# --------------------------------------------------------------------------- 12: successive halving


def _sha_full_spent(curves, r, eta):
    from course_lib.optuna_search import successive_halving

    best, _ = successive_halving(curves, r, eta)
    return best, len(curves) * len(curves[0])


def _sha_keeps_the_worst(curves, r, eta):
    from course_lib.optuna_search import successive_halving

    return successive_halving([[-v for v in c] for c in curves], r, eta)


def _sha_never_trains_on(curves, r, eta):
    best = max(range(len(curves)), key=lambda i: (curves[i][r - 1], -i))
    return best, len(curves) * r


def test_successive_halving_check_tells_right_from_three_mistakes():
    from course_lib.optuna_search import successive_halving

    assert checks.check_successive_halving(successive_halving).passed
    assert checks.check_successive_halving(_stub).not_implemented
    msg = checks.check_successive_halving(_sha_full_spent).message
    assert "up to the rung where it was cut" in msg
    assert "HIGHEST value" in checks.check_successive_halving(_sha_keeps_the_worst).message
    assert "at the END" in checks.check_successive_halving(_sha_never_trains_on).message
    assert "expected a pair" in checks.check_successive_halving(lambda c, r, e: 3).message
