"""Lesson 09's performance model: its arithmetic by hand, the band verdicts on simulated GPUs, and a counted step."""

import math

import pytest
import torch
from torch import nn

from course_lib.perf import model as M
from course_lib.perf import peaks
from course_lib.perf.probe import DeviceCurves, HardwareProbe


def _counts_of(module: nn.Module, x: torch.Tensor, *, lr: float = 0.1) -> M.StepCounts:
    """Count one SGD step of ``module`` on ``x`` through the course's engine (one process)."""
    from course_lib.parallel.data_parallel import DataParallel
    from course_lib.precision import Precision
    from course_lib.train.engine import Engine

    dev = torch.device("cpu")
    engine = Engine(module, torch.optim.SGD(module.parameters(), lr=lr), precision=Precision("fp32", dev),
                    parallel=DataParallel(x.shape[0], None, dev), loss_sum=lambda net, mb: net(mb[0]).sum())
    return M.count_step(engine, (x,))


# --------------------------------------------------------------------------- FLOPs by hand


def test_flops_of_a_linear_layer_by_hand():
    b, d_in, d_out = 8, 16, 4
    counts = _counts_of(nn.Linear(d_in, d_out), torch.randn(b, d_in))
    fwd = sum(o.flops for o in counts.ops if o.phase == "forward")
    bwd = sum(o.flops for o in counts.ops if o.phase == "backward")
    assert fwd == 2 * b * d_in * d_out  # one multiply-add per weight per sample
    # backward: the weight's gradient (2 b d_in d_out); the input needs none (it is not a parameter)
    assert bwd == 2 * b * d_in * d_out


def test_flops_of_two_linear_layers_include_the_input_gradient_of_the_second():
    b, d = 4, 8
    counts = _counts_of(nn.Sequential(nn.Linear(d, d), nn.Linear(d, d)), torch.randn(b, d))
    bwd = sum(o.flops for o in counts.ops if o.phase == "backward")
    assert bwd == 3 * 2 * b * d * d  # two weight gradients + one input gradient


def test_attention_flops_by_hand_on_the_cpu_kernel():
    b, h, t, d = 2, 4, 16, 8
    q = torch.randn(b, h, t, d, requires_grad=True)

    class Attn(nn.Module):
        def forward(self, x):
            return torch.nn.functional.scaled_dot_product_attention(x, x, x)

    from torch.utils._python_dispatch import TorchDispatchMode

    seen = []

    class Spy(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            seen.append(M.op_flops(func, args, kwargs, out))
            return out

    with Spy():
        y = Attn()(q)
        fwd = sum(seen)
        y.sum().backward()
    assert fwd == 4 * b * h * t * t * d  # Q K^T and P V
    assert sum(seen) - fwd == 8 * b * h * t * t * d  # dQ, dK, dV and dP: twice the forward


def test_views_move_no_bytes_and_memory_adds_up():
    counts = _counts_of(nn.Linear(16, 4), torch.randn(8, 16))
    assert all(o.bytes >= 0 for o in counts.ops)
    assert counts.param_bytes == (16 * 4 + 4) * 4
    assert counts.grad_bytes == counts.param_bytes
    assert counts.optimizer_state_bytes == 0  # SGD without momentum keeps nothing
    assert counts.activation_bytes > 0
    assert counts.memory_bytes == 2 * counts.param_bytes + counts.activation_bytes


def test_counts_are_linear_in_the_batch():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    a, b, c = (_counts_of(net, torch.randn(n, 8)) for n in (4, 12, 8))
    mid = M.interpolate(a, b, 8)
    assert [o.flops for o in mid.ops] == pytest.approx([o.flops for o in c.ops])
    assert [o.bytes for o in mid.ops] == pytest.approx([o.bytes for o in c.ops])


# --------------------------------------------------------------------------- roofline and overlap


def test_roofline_is_the_slower_of_compute_and_traffic():
    # 1 GFLOP at 100 GFLOP/s = 10 ms; 1 MB at 10 GB/s = 0.1 ms: compute-bound
    assert M.roofline_time(1e9, 1e6, 100e9, 10e9) == pytest.approx(0.01)
    # 1 MFLOP (10 us) moving 100 MB (10 ms): memory-bound, plus a 5 us overhead
    assert M.roofline_time(1e6, 1e8, 100e9, 10e9, overhead_s=5e-6) == pytest.approx(0.01 + 5e-6)
    # the ridge point: intensity flops/bytes = 10 -> both take the same time
    assert M.roofline_time(1e10, 1e9, 100e9, 10e9) == pytest.approx(0.1)
    with pytest.raises(ValueError):
        M.roofline_time(-1, 0, 1, 1)


def test_bucket_overlap_by_hand():
    # backward produces bucket 0 at 1 ms, bucket 1 at 3 ms; each all-reduce takes 1.5 ms
    end, exposed = M.bucket_overlap([1.0, 3.0], [1.5, 1.5])
    assert end == pytest.approx(4.5)  # first runs 1 -> 2.5, second 3 -> 4.5
    assert exposed == pytest.approx(1.5)  # only the last one sticks out of backward
    # communication slower than backward: the all-reduces queue up behind each other
    end, exposed = M.bucket_overlap([1.0, 2.0, 3.0], [2.0, 2.0, 2.0])
    assert end == pytest.approx(7.0) and exposed == pytest.approx(4.0)
    # one bucket at the end of backward: nothing hidden
    assert M.bucket_overlap([5.0], [2.0]) == (pytest.approx(7.0), pytest.approx(2.0))


def test_ddp_buckets_respect_the_caps_in_order():
    mib = 2**20
    grads = [(mib // 2, 1.0), (mib // 2, 2.0), (mib, 3.0), (10 * mib, 4.0), (20 * mib, 5.0)]
    buckets = M.ddp_buckets(grads, cap_bytes=25 * mib, first_cap_bytes=mib)
    assert buckets == [(mib, 2.0), (11 * mib, 4.0), (20 * mib, 5.0)]


def test_prediction_adds_its_parts_and_hides_communication_behind_backward():
    curves = DeviceCurves("fake", [(1.0, 1e9), (1e12, 1e9)], [(1.0, 1e9), (1e12, 1e9)], overhead_s=0.0)
    ops = [M.OpCost("forward", "a", "mm", 1e6, 0), M.OpCost("backward", "a", "mm", 2e6, 0),
           M.OpCost("optimizer", "Global", "add_", 0, 4e3)]
    counts = M.StepCounts(8, ops, 1000, 0, 0, grad_ready=[(1000, 1)])
    one = M.predict_step(counts, curves, data_s=1e-3, step_overhead_s=2e-3)
    assert one.forward_s == pytest.approx(1e-3) and one.backward_s == pytest.approx(2e-3)
    assert one.optimizer_s == pytest.approx(4e-6)
    assert one.step_s == pytest.approx(1e-3 + 1e-3 + 2e-3 + 4e-6 + 2e-3)
    two = M.predict_step(counts, curves, world_size=2, link=(1e-3, 0.0), step_overhead_s=0.0)
    # ring on 2 ranks: 2(p-1) alpha = 2 ms, all after backward (the only bucket is ready at its end)
    assert two.comm_s == pytest.approx(2e-3) and two.exposed_comm_s == pytest.approx(2e-3)
    with pytest.raises(ValueError):
        M.predict_step(counts, curves, world_size=2)


def test_strong_scaling_falls_and_weak_scaling_holds_when_communication_is_free():
    curves = DeviceCurves("fake", [(1.0, 1e9), (1e12, 1e9)], [(1.0, 1e12), (1e12, 1e12)], overhead_s=0.0)

    def counts(b):
        return M.StepCounts(b, [M.OpCost("forward", "a", "mm", 1e6 * b, 0)], 4, 0, 0, [(4, 1)])

    a, b = counts(1), counts(2)
    weak = M.scaling_curve(a, b, curves, (0.0, 0.0), batch=64, ps=[1, 4, 16], mode="weak", step_overhead_s=1e-3)
    assert [r["efficiency"] for r in weak] == pytest.approx([1.0, 1.0, 1.0])
    strong = M.scaling_curve(a, b, curves, (0.0, 0.0), batch=64, ps=[1, 4, 16], mode="strong", step_overhead_s=1e-3)
    eff = [r["efficiency"] for r in strong]
    assert eff[0] == 1.0 and eff[1] < 1.0 and eff[2] < eff[1]  # the fixed overhead does not shrink with p


def test_a_faster_device_scales_worse_on_the_same_network():
    """The seed talk's point: 10x the FLOPS, the same links -> lower efficiency at the same P."""
    slow = DeviceCurves("slow", [(1.0, 1e9), (1e12, 1e9)], [(1.0, 1e12), (1e12, 1e12)], overhead_s=0.0)
    fast = M.scale_curves(slow, flops_factor=10.0)

    def counts(b):
        return M.StepCounts(b, [M.OpCost("forward", "a", "mm", 1e6 * b, 0),
                                M.OpCost("backward", "a", "mm", 2e6 * b, 0)], 4_000_000, 0, 0, [(4_000_000, 1)])

    link = (5e-6, 1 / 10e9)
    kw = dict(batch=4096, ps=[1, 64], mode="strong", step_overhead_s=0.0)
    e_slow = M.scaling_curve(counts(1), counts(2), slow, link, **kw)[-1]["efficiency"]
    e_fast = M.scaling_curve(counts(1), counts(2), fast, link, **kw)[-1]["efficiency"]
    assert e_fast < e_slow


def test_step_overhead_is_what_the_roofline_leaves_unexplained():
    curves = DeviceCurves("fake", [(1.0, 1e9), (1e12, 1e9)], [(1.0, 1e9), (1e12, 1e9)], overhead_s=1e-6)
    tiny = M.StepCounts(8, [M.OpCost("forward", "a", "mm", 1e6, 0)] * 3, 4, 0, 0)
    assert M.step_overhead(0.010, tiny, curves) == pytest.approx(0.010 - 3e-3)
    assert M.step_overhead(0.001, tiny, curves) == pytest.approx(3e-6)  # never below the per-op floor


# --------------------------------------------------------------------------- peaks and bands


def test_every_reference_has_a_source_and_dense_figures_in_order():
    for name in ["V100 SXM2", "A100 40GB SXM", "A100 80GB SXM", "H100 SXM", "H100 PCIe", "H200", "L40S", "MI250X"]:
        ref = peaks.REFERENCE_PEAKS[name]
        assert ref.source and ref.memory_bandwidth > 5e11
        half = [ref.flops[d] for d in ("bf16", "fp16") if ref.flops[d]]
        assert all(h > ref.flops["fp32"] for h in half)
    assert peaks.REFERENCE_PEAKS["V100 SXM2"].flops["bf16"] is None
    assert peaks.REFERENCE_PEAKS["H100 SXM"].flops["bf16"] == pytest.approx(989.5e12)  # dense, not 1979 (sparse)


@pytest.mark.parametrize(
    "name,entry",
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM"),
        ("NVIDIA A100-SXM4-40GB", "A100 40GB SXM"),
        ("Tesla V100-SXM2-32GB", "V100 SXM2"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA L40S", "L40S"),
        ("AMD Instinct MI250X", "MI250X"),
    ],
)
def test_driver_names_find_their_reference(name, entry):
    assert peaks.find_reference(name).name == entry


def test_a_measurement_falls_in_its_band_below_it_or_above_the_peak():
    frac, where = peaks.band("matmul", 800e12, 989.5e12)
    assert frac == pytest.approx(0.8085, abs=1e-3) and where == peaks.IN_BAND
    assert peaks.band("matmul", 300e12, 989.5e12)[1] == peaks.BELOW_BAND
    assert peaks.band("h2d", 10e9, 64e9)[1] == peaks.BELOW_BAND
    assert peaks.band("memory", 3e12, None) == (None, peaks.NO_PEAK)
    assert peaks.band("matmul", 2000e12, 989.5e12)[1] == peaks.ABOVE_PEAK
    with pytest.raises(ValueError):
        peaks.band("disk", 1, 1)


def test_probe_table_on_a_simulated_h100():
    curves = DeviceCurves("cuda", [(2e9, 500e12), (2e12, 800e12)], [(1e6, 1e12), (1e9, 3.0e12)], 5e-6)
    probe = HardwareProbe("NVIDIA H100 80GB HBM3", curves, {"bf16": (800e12, 8192), "fp32": (50e12, 8192)},
                          h2d_Bps=20e9)
    rows = {r["measurement"].split(" (")[0]: r for r in probe.rows()}
    assert rows["matmul bf16"]["fraction"] == pytest.approx(800 / 989.5)
    assert rows["memory copy"]["band"] == peaks.IN_BAND  # 3.0 of 3.35 TB/s
    assert rows["host to device"]["band"] == peaks.BELOW_BAND  # 20 of 64 GB/s
    assert "host to device" in probe.summary() and peaks.BELOW_BAND in probe.summary()
    assert "H100" in str(probe.table())


def test_curves_interpolate_on_log_axes_and_hold_flat_at_the_ends():
    c = DeviceCurves("cpu", [(1e3, 1e9), (1e5, 1e11)], [(1e3, 1e9), (1e5, 1e10)], 1e-6)
    assert c.flops_at(1e4) == pytest.approx(1e10)
    assert c.flops_at(1e9) == pytest.approx(1e11) and c.flops_at(1) == pytest.approx(1e9)
    assert c.peak_flops == 1e11 and c.peak_bandwidth == 1e10 and c.memory_bandwidth == 1e10
    assert DeviceCurves.from_dict(c.to_dict()) == c
    assert math.isclose(c.bandwidth_at(1e4), math.sqrt(1e9 * 1e10))


# --------------------------------------------------------------------------- the lesson's readings


def test_the_exercise_check_passes_the_reference_and_explains_a_missing_overlap():
    from course_lib import checks

    assert checks.check_bucket_overlap(lambda r, c: M.bucket_overlap(r, c)[1]).passed
    wrong = checks.check_bucket_overlap(lambda r, c: sum(c))
    assert not wrong.passed and "nothing overlapped" in wrong.message


def test_probe_runs_on_the_cpu_and_reads_as_measured_only():
    from course_lib.perf.probe import probe_hardware

    probe = probe_hardware("cpu", matmul_sizes=(8, 16), copy_sizes=[4096, 16384], repeats=1)
    assert probe.h2d_Bps is None  # host-to-device is a GPU measurement
    assert probe.curves.peak_flops > 0 and probe.curves.overhead_s > 0
    rows = probe.rows(reference=None)
    assert all(r["fraction"] is None for r in rows)
    assert "no reference peak" in probe.summary()


def test_gpu_timing_reads_cuda_events_not_the_host_clock(monkeypatch):
    """No GPU needed: a fake CUDA event pair that reports 2 ms per call, whatever the host clock says."""
    from course_lib.perf import probe

    class FakeEvent:
        ticks = [0]

        def __init__(self, enable_timing=False):
            self.t = None

        def record(self):
            FakeEvent.ticks[0] += 1
            self.t = FakeEvent.ticks[0]

        def synchronize(self):
            pass

        def elapsed_time(self, end):  # milliseconds, as torch.cuda.Event reports
            return 2.0 * (end.t - self.t)

    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    calls = []
    assert probe._timed(lambda: calls.append(1), torch.device("cuda"), repeats=3) == pytest.approx(0.002)
    assert len(calls) == 4  # one untimed call first


