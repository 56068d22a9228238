"""The training loop's adaptive batch (lesson 11): the sampler takes a new batch size mid-epoch (and yields what
it always did when none comes), and the loop's ``adapt_batch`` hook sets the batch and lr it is given."""


import pytest
import torch

import course_lib.train.ncf as train
from course_lib.data.sampler import DeviceSampler
from course_lib.lessons import l11_batch_size_science as study
from course_lib.train import RunHooks, TrainConfig, train_to_target

CFG = TrainConfig(global_batch_size=256, base_lr=2e-3, optimizer="adam", factors=16, layers=(32, 16), max_epochs=1.0,
                  eval_every_epochs=0.25, stop_at_target=False)


def _old_epoch(s: DeviceSampler):
    """DeviceSampler's epoch as it was written before the batch could change mid-epoch (the reference)."""
    n, b = s.users.numel(), s.batch_size
    perm = torch.randperm(n, generator=s.generator, device=s.device)
    chunk, rest = max(s.chunk_positives, b), None
    for lo in range(0, n, chunk):
        u, i, y = s._chunk(perm[lo:lo + chunk])
        if rest is not None:
            u, i, y = (torch.cat([r, x]) for r, x in zip(rest, (u, i, y)))
        full = u.numel() // b * b
        for start in range(0, full, b):
            yield u[start:start + b], i[start:start + b], y[start:start + b]
        rest = (u[full:], i[full:], y[full:])
    if rest is not None and rest[0].numel() and not s.drop_last:
        yield rest


@pytest.mark.parametrize("b,chunk", [(7, 16), (64, 16), (100, 1 << 16), (3, 5)])
def test_the_sampler_yields_what_it_always_did_at_a_fixed_batch(b, chunk):
    g = torch.Generator().manual_seed(0)
    users, items = torch.randint(0, 50, (333,), generator=g), torch.randint(0, 40, (333,), generator=g)
    new, old = (DeviceSampler(users, items, 40, batch_size=b, seed=3, chunk_positives=chunk) for _ in range(2))
    for _ in range(2):  # two epochs: the generator's state carries over identically
        a, r = list(new), list(_old_epoch(old))
        assert len(a) == len(r) == len(new)
        assert all(torch.equal(x, y) for ba, br in zip(a, r) for x, y in zip(ba, br))


def test_a_batch_changed_mid_epoch_takes_effect_at_the_next_batch_and_every_positive_still_comes_once():
    users, items = torch.arange(300), torch.arange(300) % 40
    s = DeviceSampler(users, items, 40, batch_size=50, seed=0, neg_per_pos=1, chunk_positives=64)
    sizes, positives = [], []
    for n, (u, i, y) in enumerate(s):
        sizes.append(u.numel())
        positives += u[y == 1].tolist()
        if n == 2:
            s.batch_size = 120
    assert sizes[:3] == [50, 50, 50] and set(sizes[3:-1]) == {120} and sum(sizes) == 600
    assert sorted(positives) == list(range(300))


def test_the_loop_takes_the_batch_and_lr_the_hook_gives(data):
    chosen = []

    def probe(model, point):
        return {"seen": point["samples"]} if point["step"] else None

    def adapt(record):
        chosen.append(record)
        return (1024, 4e-3) if len(chosen) == 1 else None

    r = train_to_target(data, CFG, device="cpu", progress="none", hooks=RunHooks(on_eval=probe, adapt_batch=adapt))
    spe = train.samples_per_epoch(data, CFG)
    first = chosen[0]["step"]
    assert first == r.curve["step"][1] and r.samples > first * 256
    later = [p for p in r.probes if p["step"] > first]
    # the new batch from there on (one partial batch where the epoch ends)
    assert 0 <= (later[0]["step"] - first) * 1024 - (later[0]["samples"] - first * 256) < 1024
    assert r.epochs == pytest.approx(r.samples / spe)
    # the budget in epochs, through stop_early
    r2 = train_to_target(data, CFG.replace(max_epochs=2.0), device="cpu", progress="none", hooks=RunHooks(
        on_eval=probe, adapt_batch=lambda rec: (1024, 4e-3), stop_early=study.epoch_budget(1.0)))
    assert 1.0 <= r2.epochs < 1.0 + 4 * 0.25 and r2.stopped_early
    with pytest.raises(ValueError, match="no lr schedule"):
        train_to_target(data, CFG.replace(warmup_steps=10), device="cpu", progress="none",
                        hooks=RunHooks(on_eval=probe, adapt_batch=adapt))
    with pytest.raises(ValueError, match="on_eval probe"):
        train_to_target(data, CFG, device="cpu", progress="none", hooks=RunHooks(adapt_batch=adapt))


def test_the_bert_loop_refuses_the_adaptive_batch_by_name():
    with pytest.raises(ValueError, match="adapt_batch"):
        RunHooks(adapt_batch=lambda record: None).only_shared("train_mlm")
