"""Lesson 09's step model split per scheme (course_lib.perf.schemes, lesson 10): counted on the meta device as
on the CPU, ZeRO's arithmetic, lesson 09's step on one rank, the bubble formula for equal stages, the choice."""

import pytest
import torch

from course_lib.lessons import l09_performance_model as ps
from course_lib.models.bert import BertForMLM, bert_config
from course_lib.parallel.sharded import PRECISIONS, memory_per_rank
from course_lib.perf import model as M
from course_lib.perf import schemes as S
from course_lib.perf.probe import DeviceCurves

CURVES = DeviceCurves("test", [(1.0, 1e12), (1e15, 1e12)], [(1.0, 1e11), (1e15, 1e11)], 1e-6)
FREE = (0.0, 0.0)  # a link that costs nothing
TINY = bert_config("tiny", vocab_size=200, max_position=16, dropout=0.0, attention_dropout=0.0)


@pytest.fixture(scope="module")
def tiny_counts():
    return ps.bert_step_counts(TINY, (2, 4), 16, gpu=False)


def test_counted_on_the_meta_device_as_on_the_cpu(tiny_counts):
    """The same step counted with values (CPU) and without (meta): the same FLOPs, parameters and optimizer
    state; activations within a few percent (meta runs attention's math form, the CPU its fused kernel)."""
    from course_lib.data.text import shape_only_mlm_data
    from course_lib.train import mlm

    torch.manual_seed(0)
    model, cpu = BertForMLM(TINY), torch.device("cpu")
    cfg = mlm.MLMTrainConfig(global_batch_size=2, micro_batch_size=None, optimizer="adam", dropout=0.0)
    engine = mlm._engine(cfg, model, cpu)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    engine.optimizer.step()
    engine.optimizer.zero_grad(set_to_none=True)
    (inputs, labels), count = mlm._global_batch(shape_only_mlm_data(200, 16, 2, device="cpu"), cfg,
                                                torch.Generator().manual_seed(0), cpu)
    real = M.count_step(engine, (inputs, labels), count, batch_size=2)
    meta = tiny_counts[0]
    assert meta.flops == real.flops
    assert (meta.param_bytes, meta.optimizer_state_bytes) == (real.param_bytes, real.optimizer_state_bytes)
    assert sum(meta.param_bytes_by_module.values()) == real.param_bytes  # every parameter under one module
    acts_meta, acts_real = sum(meta.activation_by_module.values()), sum(real.activation_by_module.values())
    assert acts_meta == pytest.approx(acts_real, rel=0.05)
    assert acts_meta < meta.activation_bytes  # the weights autograd saves are not counted as activations


def test_counts_at_two_batches_interpolate_and_the_gpu_optimizer_is_a_few_operations(tiny_counts):
    a, b = tiny_counts
    assert [(o.phase, o.op) for o in a.ops] == [(o.phase, o.op) for o in b.ops]
    m = M.interpolate(a, b, 8)
    assert m.flops == pytest.approx(a.flops + 3 * (b.flops - a.flops))
    gpu = ps.bert_step_counts(TINY, (2, 4), 16, gpu=True)[0]
    n_opt = lambda c: sum(o.phase == "optimizer" for o in c.ops)  # noqa: E731
    # Adam's foreach: one operation per step, not one per tensor (clipping stays per tensor)
    assert n_opt(gpu) < n_opt(a) / 2


def test_meta_nonzero_gives_the_rows_asked_for():
    x = torch.empty(3, 5, device="meta")
    with M.meta_nonzero(7):
        assert tuple(x.nonzero().shape) == (7, 2)


def test_module_names_say_where_the_work_is():
    assert S.block_of("BertForMLM.blocks.11.attn.qkv") == 11 and S.block_of("BertForMLM.head.decoder") is None
    assert S.block_of("BertForMLM.blocks.3") == 3 and S.block_of("BertForMLM.blocks_x.3") is None
    assert S.tensor_split("BertForMLM.blocks.0.mlp.fc") and S.tensor_split("BertForMLM.blocks.0.attn")
    assert not S.tensor_split("BertForMLM.blocks.0.ln1") and not S.tensor_split("BertForMLM.head.transform")


@pytest.mark.parametrize("precision", ["fp32", "mixed"])
def test_zero_schemes_keep_zeros_arithmetic_and_send_its_bytes(tiny_counts, precision):
    a, b = tiny_counts
    w, n = 4, a.param_bytes // 4
    link = (1e-5, 1e-9)
    preds = {p.scheme: p for p in S.predict_all(a, b, CURVES, link, world_size=w, global_batch=16, micro_batch=4,
                                               values_per_sample=16 * TINY.hidden_size, precision=precision)}
    for scheme, zero in (("DDP", "DDP"), ("ZeRO-1", "ZeRO-1"), ("ZeRO-2", "ZeRO-2"), ("FSDP", "ZeRO-3 / FSDP")):
        assert preds[scheme].state_bytes == pytest.approx(memory_per_rank(n, w, zero, precision).total)
    pb, gb, _ = PRECISIONS[precision]
    assert preds["DDP"].sent_bytes == pytest.approx(2 * (w - 1) / w * n * gb)
    assert preds["ZeRO-1"].sent_bytes == pytest.approx((w - 1) / w * n * (gb + pb))  # reduce-scatter + all-gather
    assert preds["DDP"].sent_bytes < preds["FSDP"].sent_bytes <= 1.5 * preds["DDP"].sent_bytes
    assert preds["FSDP"].gathered > 0 and preds["DDP"].gathered == 0
    assert all(p.activations == preds["DDP"].activations for p in preds.values() if p.scheme in ("ZeRO-1", "FSDP"))


def test_one_rank_is_lesson_09s_step(tiny_counts):
    a, b = tiny_counts
    p = S.predict(a, b, CURVES, FREE, scheme="DDP", world_size=1, global_batch=4, micro_batch=4, values_per_sample=1,
                  precision="fp32")
    lesson09 = M.predict_step(M.interpolate(a, b, 4), CURVES)
    assert p.step_s == pytest.approx(lesson09.step_s) and p.sent_bytes == 0 and p.exposed_comm_s == 0
    twice = S.predict(a, b, CURVES, FREE, scheme="DDP", world_size=1, global_batch=8, micro_batch=4,
                      values_per_sample=1, precision="fp32")  # two micro-batches accumulated, one optimizer step
    optimizer = sum(M.op_time(o, CURVES) for o in M.interpolate(a, b, 4).ops if o.phase == "optimizer")
    assert twice.step_s == pytest.approx(2 * p.step_s - optimizer)


def test_tensor_parallel_splits_attention_and_mlp_and_all_reduces_four_times_per_block(tiny_counts):
    a, b = tiny_counts
    kw = dict(global_batch=4, micro_batch=4, values_per_sample=16 * TINY.hidden_size, precision="fp32")
    one = S.predict(a, b, CURVES, FREE, scheme="tensor", world_size=1, **kw)
    two = S.predict(a, b, CURVES, FREE, scheme="tensor", world_size=2, **kw)
    assert two.compute_s < one.compute_s and two.activations < one.activations
    split = S._n_params(a, S.tensor_split)
    assert two.parameters == pytest.approx(4 * (a.param_bytes // 4 - split / 2))
    blocks = TINY.num_layers
    assert two.sent_bytes == pytest.approx(4 * blocks * (2 - 1) / 2 * 2 * 4 * 16 * TINY.hidden_size * 4)
    slow = S.predict(a, b, CURVES, (1e-3, 0.0), scheme="tensor", world_size=2, **kw)
    assert slow.exposed_comm_s == pytest.approx(4 * blocks * 2 * 1e-3)  # 4 ring all-reduces of 2(W-1) messages


def _equal_stages(batch: int, blocks: int = 4) -> M.StepCounts:
    """A model of ``blocks`` equal blocks and nothing else: forward 1, backward 2 units of work per sample."""
    ops = [M.OpCost("forward", f"Net.blocks.{i}.mlp.fc", "mm", 1e9 * batch, 0.0) for i in range(blocks)]
    ops += [M.OpCost("backward", f"Net.blocks.{i}.mlp.fc", "mm", 2e9 * batch, 0.0) for i in reversed(range(blocks))]
    return M.StepCounts(batch, ops, 4 * 100 * blocks, 8 * 100 * blocks, 0, [],
                        {f"Net.blocks.{i}.mlp.fc": 400 for i in range(blocks)},
                        {f"Net.blocks.{i}.mlp.fc": 1000 * batch for i in range(blocks)})


@pytest.mark.parametrize("p,m", [(2, 1), (2, 4), (2, 8), (4, 4)])
@pytest.mark.parametrize("schedule", ["GPipe", "1F1B"])
def test_pipeline_of_equal_stages_idles_by_the_formula_and_holds_what_its_schedule_holds(p, m, schedule):
    a, b = _equal_stages(1), _equal_stages(2)
    curves = DeviceCurves("test", [(1.0, 1e12), (1e15, 1e12)], [(1.0, 1e11), (1e15, 1e11)], 0.0)
    pred = S.predict(a, b, curves, FREE, scheme="pipeline", world_size=p, global_batch=m, micro_batch=1,
                     values_per_sample=10, precision="fp32", schedule=schedule)
    span = pred.compute_s + pred.idle_s  # no optimizer ops, free messages
    assert pred.idle_s / span == pytest.approx((p - 1) / (m + p - 1))
    held = m if schedule == "GPipe" else min(p, m)  # stage 0 holds the most
    assert pred.activations == pytest.approx(held * 1000 * 4 / p)
    slow = S.predict(a, b, curves, (1e-3, 0.0), scheme="pipeline", world_size=p, global_batch=m, micro_batch=1,
                     values_per_sample=10, precision="fp32", schedule=schedule)
    assert slow.exposed_comm_s > 0 and slow.sent_bytes == (2 * m if p > 2 else m) * 10 * 4


def test_fsdp_hides_its_gathers_behind_compute_on_a_fast_link_and_waits_on_a_slow_one():
    a, b = _equal_stages(1), _equal_stages(2)
    kw = dict(scheme="FSDP", world_size=2, global_batch=2, micro_batch=1, values_per_sample=10, precision="fp32")
    fast = S.predict(a, b, CURVES, (1e-6, 0.0), **kw)
    slow = S.predict(a, b, CURVES, (1.0, 0.0), **kw)
    # exposed: each pass's first gather, the last reduce-scatter, and the root's gather and reduce-scatter
    assert fast.exposed_comm_s == pytest.approx(5 * 1e-6)
    # a 1 s message: the root's 2, forward's 4 gathers and backward's 4 one after the other, the reduce-scatters on
    # their own stream beside them but for the last: 11 of the 14 s of messages
    assert (slow.comm_s, slow.exposed_comm_s) == (pytest.approx(14.0), pytest.approx(11.0, rel=0.01))


def _pred(scheme, step_s, memory, world_size=2):
    return S.SchemePrediction(scheme, world_size, 8, 4, step_s, 0.0, 0.0, 0.0, memory, 0.0, 0.0, 0.0, 0.0)


def test_the_choice_is_the_simplest_within_ten_percent_of_the_fastest_that_fits():
    preds = [_pred("DDP", 1.05, 10), _pred("ZeRO-1", 1.0, 8), _pred("tensor", 0.5, 20)]
    assert S.fastest_that_fits(preds, 15).scheme == "DDP"  # ZeRO-1 is 5 % faster: not a difference to this model
    assert S.fastest_that_fits(preds, 25).scheme == "tensor"
    assert S.fastest_that_fits(preds, 9).scheme == "ZeRO-1"
    assert S.fastest_that_fits(preds, 5) is None


def test_bad_settings_are_refused_by_name(tiny_counts):
    a, b = tiny_counts
    kw = dict(values_per_sample=1, precision="fp32")
    with pytest.raises(ValueError, match="scheme='ZeRO-4'"):
        S.predict(a, b, CURVES, FREE, scheme="ZeRO-4", world_size=2, global_batch=4, micro_batch=2, **kw)
    with pytest.raises(ValueError, match="global_batch=6 does not split over world_size=4"):
        S.predict(a, b, CURVES, FREE, scheme="DDP", world_size=4, global_batch=6, micro_batch=1, **kw)
    with pytest.raises(ValueError, match="not a whole number of micro-batches"):
        S.predict(a, b, CURVES, FREE, scheme="tensor", world_size=2, global_batch=6, micro_batch=4, **kw)
    with pytest.raises(ValueError, match="2 blocks cannot fill 4 pipeline stages"):
        S.predict(a, b, CURVES, FREE, scheme="pipeline", world_size=4, global_batch=4, micro_batch=1, **kw)
    with pytest.raises(ValueError, match="precision='bf16'"):
        S.predict(a, b, CURVES, FREE, scheme="DDP", world_size=2, global_batch=4, micro_batch=2, values_per_sample=1,
                  precision="bf16")
    assert [p.scheme for p in S.predict_all(a, b, CURVES, FREE, world_size=4, global_batch=4, micro_batch=1, **kw)] \
        == ["DDP", "ZeRO-1", "ZeRO-2", "FSDP", "tensor"]  # no pipeline of 4 stages from 2 blocks
