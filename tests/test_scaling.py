"""Lesson 06's reading of its own scaling rows (course_lib.lessons.l06_data_parallel): the numbers it states come
from the rows."""

import pytest

from course_lib.lessons.l06_data_parallel import (
    NVIDIA_NCF_SAMPLES_PER_GPU,
    scaling_reading,
    scaling_rows,
    scaling_table,
    step_time_fit,
)


def record(world, global_batch, step_s, ttt=10.0):
    return {"config": {"global_batch_size": global_batch, "peak_lr": 1e-3}, "samples_per_s": global_batch / step_s,
            "time_to_target_s": ttt, "epochs_to_target": 1.0, "train_time_s": 20.0, "comm_time_s": 0.0,
            "final_hr": 0.7}  # no all-reduce timed: the fit reads the steps as they are (a timed one is taken out
    # first, and one rank pays none: tests/test_reading_r10c.py)


def rows_for(fixed_s, per_sample_s, global_batch=16384, worlds=(1, 2, 4, 8)):
    runs = {w: record(w, global_batch, fixed_s + per_sample_s * global_batch / w) for w in worlds}
    return scaling_rows(runs, runs)


def test_fit_recovers_a_fixed_cost_and_a_per_sample_cost():
    fixed, per_sample = step_time_fit(rows_for(4e-3, 1e-7))
    assert fixed == pytest.approx(4e-3) and per_sample == pytest.approx(1e-7)


def test_reading_states_the_fixed_share_and_the_per_rank_batch_that_scales():
    """#12.12: NeuMF at a fixed global batch on 8 GPUs: a dominant fixed cost, ~1x strong scaling."""
    text = scaling_reading(rows_for(4e-3, 1e-7))  # 2048 per rank: 0.2 ms compute next to 4 ms fixed
    assert "efficiency 0.17" in text and "95% of the step does not shrink" in text
    # compute = 80% of the step from 4 x 4 ms / 0.1 us = 160,000 samples -> 262,144 (a power of two)
    assert "from about 160,000 samples per rank (the next power of two: 262,144" in text
    assert f"{NVIDIA_NCF_SAMPLES_PER_GPU:,}" in text
    # #37 (full run): the fit's figure is compared with the reference, not its power of two (which said "2x")
    assert "160,000 is 1.2x above NVIDIA's NCF reference" in text and "LARS" not in text  # the reference: Adam


def test_the_reference_clause_follows_the_fit():
    """#37 (review 06 #17): the quoted reference is compared with the fit, not appended as its explanation."""
    small = scaling_reading(rows_for(4e-3, 1e-6))  # 4 x 4 ms / 1 us = 16,000 -> 16,384 per rank
    assert "16,000 samples per rank (the next power of two: 16,384" in small
    assert "8.2x below NVIDIA's NCF reference" in small
    # the full run's case: a fit of 141,000 per rank read as "2x above" through its power of two (262,144)
    run = scaling_reading(rows_for(4e-3, 4 * 4e-3 / 141_250))
    assert "140,000 is 1.1x above NVIDIA's" in run and "262,144" in run and "2x above" not in run
    near = scaling_reading(rows_for(4e-3, 4 * 4e-3 / 131_072))
    assert "130,000 is about the same per-rank batch as NVIDIA's" in near
    assert "which is why" not in small
    two = scaling_reading(rows_for(4e-3, 1e-7, worlds=(1, 2)))
    assert "A line through 2 points fits them exactly" in two and "A line through" not in small


def test_the_table_says_how_communication_was_measured():
    """gloo times every bucket; NCCL's figure is DDP's sampled estimate: the table says which."""
    runs = {1: record(1, 1024, 0.01), 2: {**record(2, 1024, 0.006), "comm_method": "timed: every bucket's all-reduce"}}
    md = scaling_table(scaling_rows(runs, runs)).to_markdown()
    assert "comm measured by" in md and "timed: every bucket" in md


def test_reading_with_one_size_or_no_trend_says_so():
    assert "one data-parallel size" in scaling_reading(rows_for(4e-3, 1e-7, worlds=(1,)))
    flat = scaling_reading(rows_for(4e-3, 0.0))
    assert "did not shrink" in flat


def test_the_sbatch_file_is_summarised_not_printed_whole():
    """#37 item 8: lesson 06 printed the whole batch script; the options and the launch line are what to adapt."""
    from pathlib import Path

    from course_lib.lessons.l06_data_parallel import sbatch_summary

    path = Path(__file__).resolve().parents[1] / "notebooks/beyond/ncf_ddp.sbatch"
    text = sbatch_summary(path)
    assert "#SBATCH" in text and "srun" in text and len(text.splitlines()) <= 31
    assert len(text.splitlines()) < len(path.read_text().splitlines())
    # the fourth read: a comment naming torchrun was kept, cut off mid-sentence; the launch lost its continuation
    kept = text.splitlines()[1:]
    assert all(ln.startswith("#SBATCH") or not ln.lstrip().startswith("#") for ln in kept), text
    assert kept[-1].strip() == '"$@"' and kept[-2].endswith("\\"), text  # the launch, to its last line
