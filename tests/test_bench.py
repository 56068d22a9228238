"""course_lib.bench: the command-line benchmarks run and print the ratios they promise."""

import re

import pytest
import torch

from course_lib import bench


@pytest.fixture
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_shape_only_data_is_valid_mlm_input():
    data = bench.shape_only_mlm_data(vocab_size=100, seq_len=12, rows=6, device="cpu")
    assert data.train_ids.shape == (6, 12) and data.vocab_size == 100
    assert (data.train_ids[:, 0] == data.special.cls).all() and (data.train_ids[:, -1] == data.special.sep).all()
    inputs, labels = data.masked_batch(4, torch.Generator().manual_seed(0))
    assert inputs.shape == labels.shape == (4, 12) and int(inputs.max()) < 100


def test_bert_benchmark_prints_throughput_and_ratios(capsys, one_thread):
    assert bench.main(["bert", "--model", "tiny", "--seq-len", "16", "--batch-size", "4", "--steps", "1",
                       "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    seqs = {m: float(v) for m, v in re.findall(r"bert seqs/s (\w+): ([0-9.]+)", out)}
    assert set(seqs) == {"fp32", "bf16"} and all(v > 0 for v in seqs.values())
    # the ratio is the faster mode's throughput over fp32's (the printed numbers, rounded to 0.1)
    best, ratio = re.search(r"ratio (fp32|bf16) vs fp32: ([0-9.]+)", out).groups()
    assert seqs[best] == max(seqs.values())
    assert float(ratio) == pytest.approx(seqs[best] / seqs["fp32"], rel=0.02, abs=0.01)
    assert "V100" not in out  # the published figure is for BERT-base at 128 tokens only


def test_ncf_benchmark_prints_the_loader_ratio(capsys, one_thread, tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_DATA_DIR", str(tmp_path))
    assert bench.main(["ncf", "--dataset", "synthetic", "--profile", "smoke", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert float(re.search(r"ratio loader: ([0-9.]+)", out).group(1)) > 0
    assert float(re.search(r"ratio training: ([0-9.]+)", out).group(1)) > 0


def test_throughput_reading_is_read_from_the_rows():
    from course_lib.lessons.l01_baseline import throughput_reading
    from course_lib.tables import Table

    t = Table(["batch size", "steps", "samples/s", "ms/step"])
    for b, sps in ((256, 40_000), (1024, 120_000), (4096, 130_000)):
        t.add(**{"batch size": b, "steps": 10, "samples/s": sps, "ms/step": 1.0})
    text = throughput_reading(t)
    assert "from batch 256 to 4096 (16x) samples/s went from 40,000 to 130,000 (3.2x)" in text
    assert "1.08x; samples/s is flattening" in text
    # the opposite: the largest batch ran slower than the one before (lesson 01's full run: 944,582 at 16384,
    # 842,052 at 65536): a peak, not a flattening gain
    t.add(**{"batch size": 16384, "steps": 10, "samples/s": 110_000, "ms/step": 1.0})
    text = throughput_reading(t)
    assert "0.85x; samples/s stopped growing: it peaked at batch 4096 (130,000)" in text
    assert "flattening" not in text and "0.85x of that peak" in text


def test_phase_reading_and_a_table_without_timed_phases():
    from course_lib.train.ncf import TrainResult

    r = TrainResult(config={}, dataset="d", data_source="", synthetic=True, device="cpu", world_size=1,
                    target_hr=None, time_to_target_s=None, steps_to_target=None, epochs_to_target=None, epochs=1.0,
                    steps=10, samples=100, train_time_s=8.0, eval_time_s=2.0, samples_per_s=12.5,
                    phase_time_s={"sampling": 1.0, "forward_backward": 2.0, "optimizer": 5.0, "evaluation": 2.0})
    assert r.phase_reading() == ("the largest phase of the training clock is optimizer (62%); "
                                 "it is the next thing to make faster")
    r.phase_time_s = {"evaluation": 2.0}
    assert "not timed" in r.phase_reading() and "phases not timed" in str(r.table())
