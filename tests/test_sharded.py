"""course_lib.parallel.sharded, pure parts: ZeRO's memory accounting (against the paper's own
figure) and the bytes per step. DDP vs stage 1 vs FSDP2 on gloo ranks is in tests/test_model_parallel.py."""

import pytest

from course_lib.parallel import sharded as S


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




