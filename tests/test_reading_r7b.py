"""Readings fixed after the seventh full-profile read (#37, helper r7b: lessons 05, 06 and 07 of the run of
2026-12-02 in a fresh clone of 8cbfa9e, /tmp/course12; /work/notes/read-full-run-7-r7b.md). Each test feeds the reading
that run's own numbers, which printed a statement its outputs contradict, and the opposite results."""

from types import SimpleNamespace

from test_mixed_precision import AMX_SERVER
from test_reading_agreement import disagreements

from course_lib.lessons import l05_mixed_precision as L05
from course_lib.sweeps import Confirmed

# the seventh run's lesson 05, cell 11: fastest of 3 interleaved repeats at batch 16384; round 1 fast for fp32 and
# bf16 alike, rounds 2-3 about 2.2x slower for both; bf16 faster than fp32 in every round (1.23x, 1.10x, 1.12x)
SEVENTH_PHASES = {"fp32": {"sampling": 0.5807e-3, "forward_backward": 34.61e-3, "optimizer": 4.586e-3},
                  "bf16": {"sampling": 0.757e-3, "forward_backward": 25.83e-3, "optimizer": 5.637e-3},
                  "fp16": {"sampling": 1.05e-3, "forward_backward": 281.6e-3, "optimizer": 13.31e-3}}
SEVENTH_REPEATS = {"fp32": [4.1e5, 1.89e5, 1.8e5], "bf16": [5.06e5, 2.08e5, 2.02e5], "fp16": [5.53e4, 5.11e4, 5.09e4]}


def _speed(repeats, phases=SEVENTH_PHASES):
    runs = {}
    for m, reps in repeats.items():
        prec = {"mode": m, "loss_scaling": "dynamic" if m == "fp16" else "none"}
        runs[m] = L05.SpeedRun(m, max(reps), sum(phases[m].values()), phases[m], prec, 30, 3)
    return L05.PrecisionSpeed(runs, repeats, 30, load=1.7)


class _Run:  # a time-to-target run as speedup_reading reads it
    def __init__(self, mode, sps, steps=285):
        self.precision, self.samples_per_s, self.steps = {"mode": mode}, sps, steps


def _decided(bf16_s=(8.408, 24.27), fp32_s=(14.52, 26.64), steps=285):
    def run(seed, t):
        return SimpleNamespace(config={"seed": seed}, time_to_target_s=t, steps_to_target=steps, final_hr=0.752,
                               diverged=False)
    return Confirmed(["bf16", "fp32"], [[run(i, t) for i, t in enumerate(bf16_s)],
                                        [run(i, t) for i, t in enumerate(fp32_s)]], 0, "")


def test_the_speed_reading_reads_the_interleaved_rounds_where_the_repeats_spread_decides_nothing():
    """r7b 05-1: "bf16 ran 1.23x fp32 here (no measurable difference; tolerance 59%, ...) ... bf16 is not emulated
    here, so the reason it is not faster lies in the step itself" and "where NeuMF's embedding-heavy step did not
    speed up here", over rounds in which bf16 was faster every time (1.23x, 1.10x, 1.12x), forward+backward 1.34x and
    time-to-target runs at 1.73x. Opposite: rounds that disagree keep "no measurable difference"."""
    speed = _speed(SEVENTH_REPEATS)
    runs = [_Run("fp32", 3.216e5), _Run("bf16", 5.553e5)]
    text = L05.speedup_reading(speed, AMX_SERVER, "cpu", runs=runs, neumf_share=0.011, bert=("mini", 0.99),
                               load_now=1.7)
    assert text.startswith("bf16 ran 1.23x fp32 here (faster: bf16 faster than fp32 in every one of the 3 "
                           "interleaved rounds by more than 3% (1.23x, 1.10x, 1.12x)"), text
    assert "the reason it is not faster" not in text.split("fp16 ran")[0]
    assert "did not speed up here" not in text and "Yet bf16 made this step measurably faster here" in text
    assert "fp16 ran 0.13x fp32 here (slower;" in text
    table = L05.speed_table(speed, 16384, "cpu")
    extra = [r for r in speed.round_ratios("bf16")] + [speed.spread, 0.03, 3, 16, 1.1, 99, 3.216e5 / 3.216e5,
                                                        5.553e5 / 3.216e5, 285, 2, 7.70, 0.87, 0.12, 1.34, 0.12]
    extra += [34.61 / 25.83, 1 / (1 - 34.61 / 39.7767), 34.61 / 281.6, 4.586 / 39.7767, 34.61 / 39.7767]
    assert disagreements(text.split(" Autocast runs only")[0], table, extra=extra) == [], text

    # opposite: the same fastest repeats, but the rounds disagree (round 2 put fp32 ahead): no difference measured
    mixed = _speed({**SEVENTH_REPEATS, "bf16": [5.06e5, 1.8e5, 2.02e5], "fp32": [4.1e5, 1.89e5, 1.8e5]})
    other = L05.speedup_reading(mixed, AMX_SERVER, "cpu", neumf_share=0.011, bert=("mini", 0.99))
    assert other.startswith("bf16 ran 1.23x fp32 here (no measurable difference; tolerance 60%")
    assert "so the reason it is not faster lies in the step itself" in other and "interleaved rounds" not in other
    # and rounds that all put bf16 slower say so
    slower = _speed({**SEVENTH_REPEATS, "bf16": [3.9e5, 1.7e5, 1.6e5]})
    assert L05.speed_verdict(slower, "bf16", 0.54)[0] == "slower"


def test_the_rung_is_decided_by_rounds_that_all_put_one_precision_ahead():
    """r7b 05-2: cell 23 "bf16 1.23x fp32 (no measurable difference; tolerance 59%): neither measurement separates
    them; lesson 06 builds on fp32", where the seeds (8.408 vs 14.52 s, 24.27 vs 26.64 s, all 285 steps) and the three
    rounds (1.23x, 1.10x, 1.12x) all put bf16 ahead. Opposite: rounds that disagree leave fp32."""
    speed = _speed(SEVENTH_REPEATS)
    decide = _decided()
    builds_on, decided_by = L05.rung_decision(decide, "bf16", speed, below="+sqrt scaling")
    assert builds_on == "bf16" and decided_by["by"] == "pace" and decided_by["over"] == "+sqrt scaling"
    assert "faster in each of its 3 rounds by more than 3%" in decided_by["text"]
    said = L05.rung_verdict_reading(decide, "bf16", speed, builds_on)
    assert "neither measurement separates them" not in said and said.endswith("; lesson 06 builds on bf16")
    assert "bf16 1.23x fp32 (faster: bf16 faster than fp32 in every one of the 3 interleaved rounds" in said
    extra = speed.round_ratios("bf16") + [speed.ratio("bf16"), speed.spread, 0.03, 3, 16.3, 20.6, 16, 6]
    assert disagreements(said, decide.table(chosen="bf16"), extra=extra) == [], said

    mixed = _speed({**SEVENTH_REPEATS, "bf16": [5.06e5, 1.8e5, 2.02e5]})
    assert L05.rung_decision(decide, "bf16", mixed) == ("fp32", None)
    said = L05.rung_verdict_reading(decide, "bf16", mixed, "fp32")
    assert "(no measurable difference; tolerance" in said and "neither measurement separates them" in said


def test_the_activation_reading_names_what_the_cast_flushes():
    """r7b 05-3: cell 9 read the predicted zeros as "below fp16's smallest subnormal" (and the opening markdown "smaller
    than 2^-24 become zero"), while the cast, which the prediction runs (fp16_fates), flushes only what lies at or below
    half of it, 2^-25: a value between 2^-25 and 2^-24 rounds up to 2^-24. Fed activation gradients half of which lie
    there, the reading's figure is the flushed fraction (0%, not 50%) and says so; opposite, gradients at 2^-26: 50%."""
    import numpy as np

    def grads(act):
        return {"scales": (1.0, 2.0 ** 16), "batches": 2, "batch_size": 16384, "dtypes": {"out": "float16"},
                "count": {"activation": 1_546_587, "parameter": 1_607_329}, "log2": act,
                "zero": {1.0: {"activation": 0.01864, "parameter": 0.00693},
                         2.0 ** 16: {"activation": 0.00002, "parameter": 0.00001}},
                "underflow": {1.0: {"activation": 0.01863, "parameter": 0.00692},
                              2.0 ** 16: {"activation": 0.0, "parameter": 0.0}}}

    mags = {"log2": np.full(100, -19.3), "zero_in_fp16": 0.0402}
    between = np.array([-24.5] * 50 + [-19.4] * 50)  # 2^-24.5: below the smallest subnormal, above half of it
    text = L05.activation_reading(mags, grads(between))
    assert "0.00% of the activation gradients flushed to zero (at most half fp16's smallest subnormal)" in text, text
    assert "below fp16's smallest subnormal" not in text
    below_half = np.array([-26.0] * 50 + [-19.4] * 50)
    assert "50.00% of the activation gradients flushed to zero" in L05.activation_reading(mags, grads(below_half))


def _mlm(steps_to_target, best, *, every, last=None, batch=256):
    """A train_mlm record: evaluations every ``every`` steps to ``last``, at ``best`` from ``steps_to_target`` on."""
    last = last or 20 * every
    evals = list(range(every, last + 1, every))
    losses = [9.0 if s < steps_to_target else best for s in evals]
    return {"curves": {"eval_step": evals, "eval_loss": losses, "eval_time_s": [0.5 * s for s in evals]},
            "best_eval_loss": best, "diverged": False, "seqs_per_s": 100.0, "label": "x",
            "config": {"global_batch_size": batch}}


def test_the_lead_by_batch_line_follows_the_seeds_verdict_at_each_batch():
    """r7b 07-1: cell 15 printed "at batch 256: lamb lower on every seed (steps to the target: adam 23 vs lamb 20; seed
    range 2) ... the lead opens with the batch" and, on the next line, "at batch 256 the two are level within the
    evaluation interval", over LAMB at 20 and 20 steps and Adam at 22 and 24, evaluated every 2 steps (on one grid,
    LAMB reached the target first on both seeds). Opposite: seeds that disagree leave the two level."""
    from course_lib.lessons import l07_bert_lamb as L07

    def runs(adam_large, lamb_large):
        return {"adam b=32": _mlm(36, 4.484, every=4, batch=32), "lamb b=32": _mlm(56, 4.467, every=4, batch=32),
                "adam b=256 (best lr)": _mlm(adam_large[0], 4.49, every=2),
                "adam b=256 (best lr, seed 1)": _mlm(adam_large[1], 4.508, every=2),
                "lamb b=256 (best lr)": _mlm(lamb_large[0], 4.518, every=2),
                "lamb b=256 (best lr, seed 1)": _mlm(lamb_large[1], 4.533, every=2)}

    tags = ("best lr", "best lr, seed 1")
    seventh = runs((22, 24), (20, 20))
    at_large = L07.seeds_verdict([seventh[f"adam b=256 ({t})"] for t in tags],
                                 [seventh[f"lamb b=256 ({t})"] for t in tags], 4.584, 256)
    assert at_large[0] == "lamb" and "lamb lower on every seed" in at_large[1]
    said = L07.lead_by_batch(seventh, 4.584, 32, 256, seed_tags=tags)
    assert said.startswith("LAMB/Adam steps to the target: 1.56 at batch 32 (56/36), 0.87 at batch 256 (20/23)"), said
    assert "LAMB ahead at batch 256 only" in said and "level" not in said, said

    # opposite: the seeds disagree at batch 256 (LAMB first on one, Adam on the other): level, as seeds_verdict says
    mixed = runs((22, 20), (20, 24))
    assert L07.seeds_verdict([mixed[f"adam b=256 ({t})"] for t in tags],
                             [mixed[f"lamb b=256 ({t})"] for t in tags], 4.584, 256)[0] is None
    said = L07.lead_by_batch(mixed, 4.584, 32, 256, seed_tags=tags)
    assert "Adam needed fewer steps at batch 32; at batch 256 the two are level" in said, said
