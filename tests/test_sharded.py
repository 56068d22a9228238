"""course_lib.parallel.sharded, pure parts: ZeRO's memory accounting (against the paper's own
figure) and the bytes per step. DDP vs stage 1 vs FSDP2 on gloo ranks is in tests/test_model_parallel.py."""

import pytest

from course_lib.parallel import sharded as S
from course_lib.lessons import l10_model_parallelism as study


def test_zero_paper_figure_1():
    # Rajbhandari et al. 2020, Figure 1: 7.5B parameters, 64 GPUs, mixed precision + Adam (K = 12):
    # 120 GB replicated, 31.4 GB with stage 1, 16.6 GB with stage 2, 1.9 GB with stage 3.
    n, w = 7.5e9, 64
    got = {s: S.memory_per_rank(n, w, s, "mixed").total / 1e9 for s in S.SCHEMES}
    assert got["DDP"] == pytest.approx(120, abs=0.05)
    assert got["ZeRO-1"] == pytest.approx(31.4, abs=0.05)
    assert got["ZeRO-2"] == pytest.approx(16.6, abs=0.05)
    assert got["ZeRO-3 / FSDP"] == pytest.approx(1.9, abs=0.05)


def test_fp32_adam_and_one_rank():
    m = S.memory_per_rank(1000, 4, "ZeRO-1")
    assert (m.parameters, m.gradients, m.optimizer_state) == (4000, 4000, 2000)
    assert all(S.memory_per_rank(1000, 1, s).total == 16000 for s in S.SCHEMES)
    with pytest.raises(ValueError):
        S.memory_per_rank(10, 2, "ZeRO-4")


@pytest.mark.parametrize("w", [2, 4, 8, 64])
def test_fsdp_sends_one_and_a_half_times_ddp(w):
    ddp = S.comm_bytes_per_step(1e6, w, "DDP")
    assert ddp == pytest.approx(2 * (w - 1) / w * 1e6)
    assert S.comm_bytes_per_step(1e6, w, "ZeRO-1") == ddp
    assert S.comm_bytes_per_step(1e6, w, "ZeRO-3 / FSDP") == pytest.approx(1.5 * ddp)


def test_bert_sizes_from_the_model_code():
    base, large = study.bert_parameters("BERT-base"), study.bert_parameters("BERT-large")
    assert 105e6 < base["n_params"] < 115e6  # BERT-base: 110M
    assert 330e6 < large["n_params"] < 345e6  # BERT-large: 340M
    with pytest.raises(ValueError, match="unknown model 'BERT-huge'"):
        study.bert_shape("BERT-huge")


def _pred(scheme, step_s, memory, *, w=8, sent=0.0, exposed=0.0, activations=0.0):
    from course_lib.perf.schemes import SchemePrediction

    return SchemePrediction(scheme, w, 8 * w, 8, step_s - exposed, exposed, exposed, 0.0, memory - activations, 0.0,
                            0.0, activations, sent)


GIB = 2**30


def test_decision_reasons_for_each_outcome():
    fits_all = [_pred("DDP", 1.0, 2 * GIB), _pred("ZeRO-1", 0.97, GIB), _pred("tensor", 3.0, GIB / 2)]
    best = S_fit(fits_all, 4 * GIB)
    assert best.scheme == "DDP"
    assert "fits on every device" in study.decision_why(fits_all, best, 4 * GIB, 8)
    assert "ZeRO-1 is within 10% of it (DDP's step 1.031x its)" in study.decision_why(fits_all, best, 4 * GIB, 8)
    faster = [_pred("DDP", 1.0, 2 * GIB), _pred("ZeRO-1", 0.5, GIB)]
    assert "ZeRO-1 is predicted 2.00x faster" in study.decision_why(faster, S_fit(faster, 4 * GIB), 4 * GIB, 8)
    big = [_pred("DDP", 1.0, 8 * GIB, activations=6 * GIB), _pred("FSDP", 1.0, 3 * GIB)]
    why = study.decision_why(big, S_fit(big, 4 * GIB), 4 * GIB, 8)
    assert why.startswith("DDP needs 8.00 GiB per device (6.00 GiB of it activations), more than 4.00 GiB; FSDP")
    none = [_pred("DDP", 1.0, 8 * GIB, activations=7 * GIB)]
    assert study.decision_why(none, None, 4 * GIB, 8).startswith("nothing fits: the least memory is DDP's 8.00 GiB")
    assert "with 2 sequences per device, DDP fits" in study.decision_why(none, None, 4 * GIB, 8,
                                                                           (2, _pred("DDP", 0.3, 3 * GIB)))
    assert study.decision_why(none[:1], none[0], 9 * GIB, 1).startswith("fits on the device")


def S_fit(preds, device_bytes):
    from course_lib.perf.schemes import fastest_that_fits

    return fastest_that_fits(preds, device_bytes)


def test_the_node_reading_names_the_choice_what_tensor_parallelism_costs_and_what_does_not_fit():
    fast = {"BERT-x": [_pred("DDP", 0.10, 30e9), _pred("FSDP", 0.095, 20e9),
                       _pred("tensor", 0.30, 5e9, sent=2**30, exposed=0.15), _pred("pipeline", 0.2, 90e9)]}
    slow = {"BERT-x": [_pred("DDP", 0.12, 30e9), _pred("FSDP", 0.11, 20e9), _pred("tensor", 1.2, 5e9),
                       _pred("pipeline", 0.25, 90e9)]}
    text = study.node_reading({"NVLink": fast, "InfiniBand": slow}, 80e9)
    assert text.startswith("BERT-x: on NVLink, DDP (100 ms per step")
    assert "as fast as FSDP (steps at most 1.053x the fastest's, within 10%)" in text
    assert "tensor parallelism 3.0x slower (200 ms more)" in text
    # review 2026-12-01 #17: the link's share of the excess, not all of it
    assert "wait on the link for 150 ms of that, the other 50 ms are not communication" in text
    assert "on InfiniBand 10.0x (1200 ms against 120 ms)" in text
    assert text.endswith("Over 80 GB per device: pipeline x8 (1F1B, m = 8).")
    assert "no scheme fits" in study.node_reading({"NVLink": fast}, 1e9)


def test_the_node_reading_gives_the_ratio_that_put_a_scheme_within_the_edge():
    """The fourth read: "as fast as FSDP (within 10%)" beside a table whose rounded steps give 60.2 / 54.7 = 1.1005;
    the unrounded 60.16 / 54.75 = 1.099 is what decided, so the reading prints it. Opposite: 1.12, not as fast."""
    edge = {"BERT-large": [_pred("DDP", 0.06016, 30e9), _pred("FSDP", 0.05475, 20e9)]}
    assert "as fast as FSDP (steps at most 1.099x the fastest's, within 10%)" in study.node_reading(
        {"NVLink": edge}, 80e9)
    apart = {"BERT-large": [_pred("DDP", 0.0613, 30e9), _pred("FSDP", 0.05475, 20e9)]}
    said = study.node_reading({"NVLink": apart}, 80e9)
    assert said.startswith("BERT-large: on NVLink, FSDP") and "the fastest" in said and "as fast as" not in said


def test_decision_rows_grow_with_the_model_on_this_machine():
    from course_lib.perf.probe import DeviceCurves

    curves = DeviceCurves("test", [(1.0, 1e14), (1e15, 1e14)], [(1.0, 1e12), (1e15, 1e12)], 5e-6)
    rows = study.decision_rows(["BERT-base", "BERT-large"], world_size=8, device_bytes=16 * GIB, micro_batch=8,
                               seq_len=128, curves=curves, link=(5e-6, 1 / 100e9), precision="mixed")
    base, large = rows
    need = lambda r: next(p for p in r["predictions"] if p.scheme == "DDP").memory_bytes  # noqa: E731
    assert need(large) > 2 * need(base) and base["choice"] is not None
    assert study.decision_table(rows, 16 * GIB, 8).rows[0]["model"] == "BERT-base"
    one = study.decision_rows(["BERT-base"], world_size=1, device_bytes=GIB / 4, micro_batch=8, seq_len=128,
                              curves=curves, link=(0.0, 0.0), precision="mixed")[0]
    assert [p.scheme for p in one["predictions"]] == ["DDP"] and one["choice"] is None
    assert one["smaller"] is None or one["smaller"][0] < 8


def test_the_fsdp_step_reading_splits_the_gap_between_messages_and_the_rest():
    from course_lib.tables import Table
    from _quoted import unquoted

    def table(fsdp, ddp, pf, pd):
        t = Table(["scheme", "step (ms)", "predicted step (ms)"])
        t.add(scheme="DDP", **{"step (ms)": ddp, "predicted step (ms)": pd})
        t.add(scheme="FSDP2", **{"step (ms)": fsdp, "predicted step (ms)": pf})
        return t

    # review 2026-12-01 #16: measured +36 ms, the model's messages +0 ms
    t = table("76", "40", "24", "24")
    said = study.fsdp_step_reading(t)
    # read f12h 10-H1: the rest is what the model leaves out or prices too low, not timed apart here
    assert "(+36 ms)" in said and "(+0 ms)" in said and "the rest the model does not predict" in said
    assert unquoted(said, t, allowed={36, 0}) == set()
    assert "account for most of the gap" in study.fsdp_step_reading(table("76", "40", "60", "30"))
    # #37, the full run: measured +35 ms, the model -1 ms: "explain at most -1 of the +35 ms" said nothing
    t = table("65", "30", "21", "22")
    said = study.fsdp_step_reading(t)
    assert "explain none of the +35 ms (the model puts FSDP2 1 ms faster than DDP)" in said and "at most" not in said
    assert unquoted(said, t, allowed={35, 1, -1}) == set()
    assert "the model puts the two level" in study.fsdp_step_reading(table("76", "40", "24", "24"))
    # #37 (sixth full run, read r6c): the model 22.2 against 22.7 ms read "(-0 ms)"; a gap under 1 ms keeps a decimal
    t = table("70.3", "37.9", "22.2", "22.7")
    said = study.fsdp_step_reading(t)
    assert "predicts 22.2 against 22.7 ms (-0.5 ms)" in said and "(-0 ms)" not in said, said
    assert "explain none of the +32 ms (the model puts the two level)" in said
    assert unquoted(said, t, allowed={32, -0.5}) == set()
    assert "(+2 ms)" in study.fsdp_step_reading(table("70.3", "37.9", "24.7", "22.7"))  # whole ms from 1 ms on


def test_the_model_reading_says_exact_and_under():
    o = {name: {"parameters": 10, "gradients": 10, "optimizer_state": 20, "sent_bytes": 100, "step_s": 0.1}
         for name in study.MEASURED_SCHEMES}
    exact = {name: _pred(s, 0.05, 40, sent=100) for name, s in study.MEASURED_SCHEMES.items()}
    text = study.model_reading([o], exact)
    assert "sent exactly and the state it kept exactly" in text and "DDP -50%" in text and "all under" in text
    off = {name: _pred(s, 0.2, 50, sent=110) for name, s in study.MEASURED_SCHEMES.items()}
    text = study.model_reading([o], off)
    assert "off by up to 10%" in text and "off by up to 25%" in text and "all under" not in text
