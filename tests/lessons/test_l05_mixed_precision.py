"""Lesson 05 (course_lib.lessons.l05_mixed_precision, l05_speed): activation gradients under autocast, a
static loss scale from the measured gradients, fp16 with no / static / dynamic loss scaling, unscale before LARS,
throughput per precision, and the verdicts each of them feeds."""

import math

import matplotlib
import numpy as np
import pytest
import torch

matplotlib.use("Agg")

from course_lib import compare, diagrams, plots  # noqa: E402
from course_lib.lessons import l05_mixed_precision as MP  # noqa: E402
from course_lib.lessons import l05_speed as SP
from course_lib.sweeps import Confirmed  # noqa: E402
from course_lib.models.ncf import NeuMF  # noqa: E402
from course_lib.train import TrainConfig, TrainResult  # noqa: E402
from test_mixed_precision import AMX_SERVER, AVX2_LAPTOP, H100  # noqa: E402


def _close(fig):
    import matplotlib.pyplot as plt

    fig.canvas.draw()
    plt.close(fig)


def test_lesson_07s_ratio_is_quoted_only_from_a_result_of_this_profile_and_device():
    rec = {"profile": "full", "device": "cpu",
           "throughput": {"fp32": {"seqs_per_s": 10.0}, "bf16": {"seqs_per_s": 17.1}}}
    assert SP.saved_bert_ratio(rec, "full", "cpu") == pytest.approx(1.71)
    assert SP.saved_bert_ratio(rec, "smoke", "cpu") is None
    assert SP.saved_bert_ratio(rec, "full", torch.device("cuda")) is None
    assert SP.saved_bert_ratio(None, "full", "cpu") is None
    assert SP.saved_bert_ratio({**rec, "throughput": {"fp32": {"seqs_per_s": 1.0}}}, "full", "cpu") is None


def test_a_static_scale_is_chosen_in_the_middle_of_the_lossless_range():
    v = np.linspace(-30.0, 0.0, 200)  # log2 |g| from 2^-30 to 1
    # 2^-30 x 2^6 = 2^-24, fp16's smallest subnormal (2^-25 rounds to 0); 1 x 2^15 < 65504 < 2^16
    assert MP.lossless_scale_exponents(v) == (6, 15)
    assert MP.static_loss_scale(v) == 2.0 ** 10
    assert MP.lossless_scale_exponents(v, [-35.0]) == (11, 15)
    wide = np.linspace(-45.0, 10.0, 200)  # wider than fp16: no lossless scale, the least lossy one
    assert MP.lossless_scale_exponents(wide) is None
    best = math.log2(MP.static_loss_scale(wide))
    fates = lambda k: diagrams.fp16_fractions(wide, 2.0 ** k)
    ok = [k for k in range(-16, 48) if fates(k)["inf"] == 0]  # one inf skips the step: never traded for zeros
    assert best in ok and all(fates(best)["zero"] <= fates(k)["zero"] for k in ok)
    # many tiny gradients and one large one (the start's): counting elements alike would pick a scale that
    # overflows the large one and skips every step; the chosen scale must keep it finite
    skewed = np.concatenate([np.linspace(-43.0, -30.0, 1000), [-1.7]])  # 41 octaves: more than fp16 holds
    assert MP.lossless_scale_exponents(skewed) is None
    k = math.log2(MP.static_loss_scale(skewed))
    assert diagrams.fp16_fractions(skewed, 2.0 ** k)["inf"] == 0 and k == 17  # 2^-1.7 x 2^17 < 65504 < x 2^18
    assert diagrams.fp16_fractions(skewed, 2.0 ** 18)["inf"] > 0


def _cfg(**kw):
    return TrainConfig(global_batch_size=256, optimizer="adam", base_lr=1e-3, factors=8, layers=(16, 8), **kw)


def _model(data, seed=0):
    torch.manual_seed(seed)
    return NeuMF(data.num_users, data.num_items, factors=8, layers=(16, 8))


def test_activation_gradients_are_collected_in_fp16_and_flushing_is_measured(data):
    cfg, model = _cfg(), _model(data)
    g = MP.autocast_gradients(model, data, cfg, scales=(2.0 ** 16, 1.0))
    assert g["scales"] == (1.0, 2.0 ** 16)
    assert set(g["dtypes"]) == {"mlp.0", "out"} and set(g["dtypes"].values()) == {"float16"}
    assert g["count"]["activation"] > 0 and g["log2"].size > 0
    assert g["zero"][2.0 ** 16]["activation"] < 0.01 and g["zero"][2.0 ** 16]["parameter"] < 0.01
    assert g["underflow"][2.0 ** 16] == {"activation": 0.0, "parameter": 0.0}  # the reference scale itself
    # a scale of 2^-30 pushes every activation gradient below 2^-25: all of them underflow
    crushed = MP.autocast_gradients(model, data, cfg, scales=(2.0 ** -30, 2.0 ** 16))
    assert crushed["zero"][2.0 ** -30]["activation"] > 0.99 and crushed["underflow"][2.0 ** -30]["activation"] > 0.98
    assert all(p.grad is None for p in model.parameters())  # the probe leaves no gradients behind


def test_lars_rows_show_precision_step_unscaled_and_what_scaled_gradients_would_do(data):
    rows = MP.lars_unscale_rows(_model(data), data, _cfg(), scale=2.0 ** 16)
    assert {r["layer"] for r in rows} == {"gmf_user.weight", "gmf_item.weight", "mlp_user.weight", "mlp_item.weight",
                                          "mlp.0.weight", "out.weight"}  # biases are not adapted
    for r in rows:
        assert r["Precision.step"] == pytest.approx(r["fp32"], rel=1e-6)
        assert r["on S x g / fp32"] == pytest.approx(2.0 ** -16, rel=1e-3)  # no weight decay: exactly 1/S (but eps)
    through, scaled = MP.lars_unscale_comparisons(rows, 2.0 ** 16)
    assert through.outcome == compare.SAME and through.n == "6 layers"
    assert scaled.outcome == compare.LOWER and scaled.estimate == pytest.approx(2.0 ** -16, rel=1e-3)


def test_loss_scaling_runs_train_every_variant_for_the_same_steps(data):
    rows = MP.loss_scaling_runs(data, _cfg(max_epochs=1.0), steps=6, static_scale=2.0 ** 10, device="cpu")
    assert [r["loss scaling"] for r in rows] == ["none", "none", "static", "dynamic"]
    assert [r["precision"] for r in rows] == ["fp32", "fp16", "fp16", "fp16"]
    assert all(r["steps"] == 6 and r["HR@10"] is not None for r in rows)
    assert rows[2]["final scale"] == 2.0 ** 10 and rows[2]["run"] == "fp16, static scale 2^10"
    assert rows[1]["final scale"] == 1.0 and rows[0]["activation grads zero"] is None
    # a run at 2^16 or above has no larger scale probed, so no underflow separated
    assert all(0.0 <= r["activation grads underflow"] <= r["activation grads zero"] <= 1.0 if
               r["final scale"] < 2.0 ** 16 else r["activation grads underflow"] is None for r in rows[1:])
    rec = MP.scaling_record(MP.autocast_gradients(_model(data), data, _cfg()), rows,
                            SP.precision_throughput(data, _cfg(), ("fp32", "bf16"), steps=1, device="cpu", repeats=1,
                                                    warmup_steps=0), 2.0 ** 10)
    assert rec["static_scale"] == 2.0 ** 10 and rec["static_skipped_steps"] == rows[2]["skipped steps"]
    assert set(rec) >= {"fp32_hr", "none_activation_underflow", "bf16_vs_fp32", "activation_grads_underflow_unscaled"}
    assert all(isinstance(v, (int, float, bool)) or v is None for v in rec.values())
    assert [r["skipped steps"] for r in MP.loss_scaling_table(rows).rows] == [r["skipped steps"] for r in rows]


def test_the_loss_scaling_runs_are_short_only_where_fp16_is_emulated():
    """Full length where the device has fp16 units (AVX512-FP16, tensor cores), short where autocast emulates fp16:
    a CPU without the flags, or the CPU of a GPU machine when the lesson runs there."""
    epochs = lambda hw, device: MP.scaling_epochs(hw, device, full=1.0, emulated=0.25)  # noqa: E731
    assert epochs(AVX2_LAPTOP, "cpu") == 0.25 and epochs(AMX_SERVER, "cpu") == 1.0
    assert epochs(H100, "cuda") == 1.0 and epochs(H100, "cuda:0") == 1.0 and epochs(H100, "cpu") == 0.25
    assert MP.scaling_epochs(AVX2_LAPTOP, "cpu", full=0.1, emulated=0.25) == 0.1  # never longer than the full set


def test_throughput_is_measured_in_steady_state_with_interleaved_repeats(data):
    speed = SP.precision_throughput(data, _cfg(), ("fp32", "fp16"), steps=2, device="cpu", repeats=2, warmup_steps=1)
    assert list(speed) == ["fp32", "fp16"] and all(len(v) == 2 for v in speed.repeats.values())
    assert speed.ratio("fp32") == 1.0 and math.isfinite(speed.spread)
    run = speed["fp16"]
    assert run.samples_per_s == max(speed.repeats["fp16"]) and run.steps == 3 and len(run.history["loss_scale"]) == 3
    assert set(run.phase_s) == {"sampling", "forward_backward", "optimizer"}
    assert run.precision["loss_scaling"] == "dynamic"
    assert [r["vs fp32"] for r in SP.speed_table(speed).rows][0] == "1.00x"
    _close(plots.plot_precision_phases({m: r.phase_s for m, r in speed.items()}, title="phases"))
    _close(plots.plot_loss_scale(run.history))


def test_linear_share_counts_a_tied_weight_once(data):
    model = _model(data)
    lin = sum(p.numel() for m in (model.mlp[0], model.out) for p in m.parameters())
    assert SP.linear_share(model) == pytest.approx(lin / sum(p.numel() for p in model.parameters()))
    from course_lib.tiers import plan

    preset, share = SP.bert_linear_share(plan(AVX2_LAPTOP, "smoke"))
    assert preset == "tiny" and 0.5 < share <= 1.0


def test_the_static_scale_fits_the_gradients_the_runs_start_with(data):
    """The static scale also sees the initial model's gradients (the largest a run meets): a scale chosen
    from the others alone overflows the start; with them, the chosen scale moves the largest start gradient
    into fp16 without overflow."""
    cfg = TrainConfig(global_batch_size=256, base_lr=1e-3, optimizer="adam")
    start = MP.start_gradient_log2(data, cfg, batches=2, device="cpu")
    assert start.size and np.isfinite(start).all()
    trained = start - 6.0  # a trained model's gradients, 2^6 smaller: alone they allow a scale 2^6 larger
    alone, both = MP.static_loss_scale(trained), MP.static_loss_scale(trained, start)
    assert both < alone
    assert math.isfinite(float(torch.tensor(2.0 ** float(start.max()) * both).half()))
    assert not math.isfinite(float(torch.tensor(2.0 ** float(start.max()) * alone).half()))


def _speed(rates: dict, phases: dict | None = None, repeats: dict | None = None, scaling: str = "dynamic"):
    runs = {}
    for m, r in rates.items():
        ph = (phases or {}).get(m, {"sampling": 0.0001, "forward_backward": 0.004, "optimizer": 0.002})
        prec = {"mode": m, "loss_scaling": scaling if m == "fp16" else "none"}
        runs[m] = SP.SpeedRun(m, r, ph, prec, 33)
    return SP.PrecisionSpeed(runs, repeats or {m: [r, r * 0.99] for m, r in rates.items()})


def _rows(none_hr=0.770, static_hr=0.769, dyn_hr=0.769, ref_hr=0.770, none_flushed=0.012, diverged=False):
    def row(label, precision, scaling, hr, flushed, scale, skipped=0):
        zero = None if flushed is None else flushed + 0.0001
        return {"run": label, "precision": precision, "loss scaling": scaling, "final scale": scale,
                "skipped steps": skipped, "steps": 1209, "activation grads zero": zero,
                "activation grads underflow": flushed, "parameter grads zero": zero, "train loss": 0.32, "HR@10": hr,
                "diverged": diverged and scaling == "none"}

    return [
        row("fp32", "fp32", "none", ref_hr, None, None),
        row("no", "fp16", "none", none_hr, none_flushed, 1.0),
        row("static", "fp16", "static", static_hr, 0.0, 2.0**16, 2),
        row("dyn", "fp16", "dynamic", dyn_hr, 0.0, 2.0**16),
    ]


def test_the_loss_scale_table_reads_the_record():
    def row(state, steps=33):
        return MP.loss_scale_table(state, steps, 65536.0, run="fp16's run").rows[0]

    flat = row({"mode": "fp16", "loss_scaling": "dynamic", "loss_scale": 65536.0, "skipped_steps": 0})
    assert flat["start"] == flat["end"] == "2^16" and flat["doublings"] == 0
    halved = row({"mode": "fp16", "loss_scaling": "dynamic", "loss_scale": 2.0 ** 14, "skipped_steps": 2})
    assert halved["skipped (halvings)"] == 2 and halved["doublings"] == 0
    grew = row({"mode": "fp16", "loss_scaling": "dynamic", "loss_scale": 2.0 ** 17, "skipped_steps": 1,
                "growth_interval": 100}, steps=500)
    assert grew["doublings"] == 2 and grew["steps per doubling"] == 100
    static = row({"mode": "fp16", "loss_scaling": "static", "loss_scale": 1024.0, "skipped_steps": 1})
    assert static["start"] == static["end"] == "2^10" and static["doublings"] == 0
    assert row({"mode": "bf16", "loss_scaling": "none"})["end"] == "2^0"


def test_the_loss_scaling_verdicts_follow_hr_against_the_evaluations_noise():
    """Runs within the evaluation's sampling error of fp32 are not called lower; a run 0.07 below it over 6,040 users
    (standard error about 0.005) is; a run with no HR@10 gets no verdict."""
    by = {c.question.split(", ")[1]: c for c in MP.loss_scaling_comparisons(_rows(), 6040)}
    assert set(by) == {"no - fp32", "static - fp32", "dyn - fp32"}
    assert all(c.outcome in (compare.SAME, compare.UNRESOLVED) for c in by.values())
    worse = {c.question: c.outcome for c in MP.loss_scaling_comparisons(_rows(none_hr=0.70), 6040)}
    assert worse["HR@10 after 1209 steps, no - fp32"] == compare.LOWER
    rows = _rows()
    rows[1]["HR@10"] = float("nan")
    assert len(MP.loss_scaling_comparisons(rows, 6040)) == 2


def test_a_lars_that_read_scaled_gradients_is_not_called_the_same():
    rows = [{"fp32": 0.5, "Precision.step": 0.5 * 2.0 ** -16, "on S x g / fp32": 2.0 ** -16},
            {"fp32": 2.0, "Precision.step": 2.0, "on S x g / fp32": 2.0 ** -16}]
    through, scaled = MP.lars_unscale_comparisons(rows, 2.0 ** 16)
    assert through.outcome == compare.LOWER and scaled.outcome == compare.LOWER


def test_the_speed_verdicts_come_from_the_interleaved_rounds_and_the_long_runs():
    clear = _speed({"fp32": 1.0e6, "bf16": 1.5e6}, repeats={"fp32": [1.0e6, 0.8e6, 0.95e6],
                                                            "bf16": [1.5e6, 1.2e6, 1.45e6]})
    (rounds,) = SP.speed_comparisons(clear)  # a busy round slowed both: the paired ratio still decides
    assert rounds.question == "samples/s, bf16 / fp32 (interleaved rounds)" and rounds.outcome == compare.HIGHER
    noisy = _speed({"fp32": 1.0e6, "bf16": 1.1e6}, repeats={"fp32": [1.0e6, 1.0e6, 1.0e6],
                                                            "bf16": [1.5e6, 0.8e6, 1.1e6]})
    assert SP.speed_comparisons(noisy)[0].outcome == compare.UNRESOLVED
    once = _speed({"fp32": 1.0e6, "bf16": 1.5e6}, repeats={"fp32": [1.0e6], "bf16": [1.5e6]})
    (one,) = SP.speed_comparisons(once)  # one round: its interval is the stated pace resolution, not nothing
    assert one.high / one.low == pytest.approx((1 + SP.ONE_RUN_PACE) ** 2) and one.outcome == compare.HIGHER

    class Run:
        def __init__(self, mode, sps):
            self.precision, self.samples_per_s = {"mode": mode}, sps

    _, long = SP.speed_comparisons(clear, [Run("fp32", 4.0e5), Run("bf16", 4.1e5)])
    assert long.question == "samples/s, bf16 / fp32 (time-to-target runs)" and long.outcome != compare.HIGHER


def test_the_causes_table_names_the_units_and_bounds_the_gain():
    phases = {"fp32": {"sampling": 1e-3, "forward_backward": 8e-3, "optimizer": 1e-3},
              "bf16": {"sampling": 1e-3, "forward_backward": 4e-3, "optimizer": 1e-3}}
    speed = _speed({"fp32": 1.0e6, "bf16": 1.6e6}, phases)
    (row,) = SP.speed_causes_table(speed, AVX2_LAPTOP, "cpu").rows
    assert row["16-bit units"] == "none (emulated)" and row["fwd+bwd vs fp32"] == "2.00x"
    assert row["fwd+bwd share"] == "80%" and row["at most"] == "5x"
    assert "AMX-BF16" in SP.speed_causes_table(speed, AMX_SERVER, "cpu").rows[0]["16-bit units"]
    assert "tensor cores" in SP.speed_causes_table(speed, H100, "cuda").rows[0]["16-bit units"]
    shares = SP.matmul_share_table(0.011, ("mini", 0.99), speed, None).rows
    assert [r["bf16 / fp32"] for r in shares] == ["1.60x", "—"]


def _run(mode, ttt, steps=285):
    cfg = TrainConfig(global_batch_size=16384, base_lr=8e-3, precision=mode)
    r = TrainResult(config=cfg.to_dict(), dataset="synthetic-tiny", data_source="test", synthetic=True, device="cpu",
                    world_size=1, target_hr=0.75, time_to_target_s=ttt, steps_to_target=None if ttt is None else steps,
                    epochs_to_target=None if ttt is None else 1.0, epochs=1.0, steps=steps, samples=16384 * steps,
                    train_time_s=ttt or 50.0, eval_time_s=1.0, samples_per_s=1e5, phase_time_s={}, final_hr=0.76,
                    precision={"mode": mode})
    r.curve = {"step": [steps - 5, steps]}
    return r


def _decided(runs):
    """A deciding comparison of these runs, fp32 first."""
    return Confirmed(list(runs), list(runs.values()), 0)


def test_the_rung_is_decided_by_time_to_target_then_by_pace_on_the_same_steps():
    """Two seeds' seconds that decide nothing, every run of the same 285 steps, and bf16 1.3x fp32's pace in every
    interleaved round: the pace decides for bf16. Opposite results: slower in time decides fp32; a pace within the
    rounds' noise leaves fp32."""
    fast = _speed({"fp32": 1.0e6, "bf16": 1.3e6}, repeats={"fp32": [1.0e6, 0.9e6, 1.0e6],
                                                           "bf16": [1.3e6, 1.18e6, 1.31e6]})
    tied = _decided({"fp32": [_run("fp32", 6.51), _run("fp32", 5.0)], "bf16": [_run("bf16", 6.37), _run("bf16", 6.9)]})
    comps, mode, decided_by = SP.rung_decision(tied, "bf16", fast, below="+linear scaling")
    assert [c.outcome for c in comps] == [compare.UNRESOLVED, compare.HIGHER]
    assert mode == "bf16" and decided_by["by"] == "pace" and decided_by["over"] == "+linear scaling"
    assert decided_by["text"] and len(decided_by["comparisons"]) == 2
    level = _speed({"fp32": 1.0e6, "bf16": 1.0e6}, repeats={"fp32": [1.0e6, 0.9e6], "bf16": [1.3e6, 0.7e6]})
    assert SP.rung_decision(tied, "bf16", level)[1] == "fp32"
    faster = _decided({"fp32": [_run("fp32", 10.0), _run("fp32", 10.2)], "bf16": [_run("bf16", 5.0),
                                                                                    _run("bf16", 5.1)]})
    assert SP.rung_decision(faster, "bf16", level)[2]["by"] == "time to target"
    slower = _decided({"fp32": [_run("fp32", 5.0), _run("fp32", 5.1)], "bf16": [_run("bf16", 10.0),
                                                                                  _run("bf16", 10.2)]})
    assert SP.rung_decision(slower, "bf16", fast)[1:] == ("fp32", None)
    # a run missed the target: no time row, and the seeds that reached it decide
    missed = _decided({"fp32": [_run("fp32", None)], "bf16": [_run("bf16", 5.0)]})
    comps, _, decided_by = SP.rung_decision(missed, "bf16", fast)
    assert comps == [] and decided_by["by"] == "time to target"
