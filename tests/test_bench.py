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
