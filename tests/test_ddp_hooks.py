"""course_lib.comm.hooks: the recording comm hook is DDP's average (or torch's fp16/bf16 compression),
counts what it sends, and times buckets the same way on CPU and GPU ranks (lesson 06)."""

import pytest
import torch

from course_lib import dist as cdist
from course_lib.comm import hooks
from _timing import scaled

STEPS = 4


def test_in_flight_is_the_union_of_the_intervals():
    assert hooks.in_flight_seconds([]) == 0
    assert hooks.in_flight_seconds([(0, 1), (0.5, 2), (3, 4)]) == pytest.approx(3.0)
    assert hooks.in_flight_seconds([(3, 4), (0, 1), (0.2, 0.4)]) == pytest.approx(2.0)  # any order, nested


def test_unknown_compression_is_a_clear_error():
    with pytest.raises(ValueError, match="gradient compression 'int8'.*choose one of"):
        hooks.AllReduceRecorder("int8")


class _FakeEvent:
    """torch.cuda.Event stand-in: record() takes the next tick of a fake GPU clock (ms)."""

    ticks = 0.0

    def __init__(self, enable_timing=False):
        assert enable_timing
        self.t = None

    def record(self, stream=None):
        _FakeEvent.ticks += 2.5
        self.t = _FakeEvent.ticks

    def elapsed_time(self, end):
        assert self.t is not None and end.t is not None, "read before record"
        return end.t - self.t


class _Bucket:
    def __init__(self, buffer, index=0):
        self._buffer = buffer
        self._index = index

    def buffer(self):
        return self._buffer

    def set_buffer(self, t):
        self._buffer = t

    def index(self):
        return self._index


class _Group:
    def size(self):
        return 2


class _Work:
    def __init__(self, t):
        self.t = t

    def get_future(self):
        fut = torch.futures.Future()
        self.t.mul_(2)  # the "sum over 2 ranks" of equal halves
        fut.set_result([self.t])
        return fut


def test_the_gpu_path_reads_cuda_events_after_the_run(monkeypatch):
    """The NCCL path's Python, with fake CUDA events and a fake all-reduce (no GPU, no process group)."""
    synced = []
    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: synced.append(device))
    monkeypatch.setattr(hooks.dist, "all_reduce", lambda t, group=None, async_op=False: _Work(t))
    _FakeEvent.ticks = 0.0
    clock = hooks.make_clock(torch.device("cuda", 0))
    assert isinstance(clock, hooks.CudaEventClock) and clock.kind == "CUDA events"
    for compression, size in (("none", 4), ("fp16", 2)):
        rec = hooks.AllReduceRecorder(compression, clock=clock)
        grads = torch.arange(6, dtype=torch.float32)
        out = rec.hook(_Group(), _Bucket(grads.clone())).wait()
        assert torch.equal(out.float(), grads)  # divided by 2, "summed" over 2 ranks: the average
        assert rec.bytes_sent() == 6 * size and rec.records[0]["dtype"] == {4: "float32", 2: "float16"}[size]
        assert not synced or synced[-1] is not None
        ((start, end),) = rec.intervals()  # one synchronize, then events against the reference event
        assert synced and end - start == pytest.approx(2.5e-3)  # one fake tick (2.5 ms) apart
        assert rec.in_flight_s() == pytest.approx(2.5e-3)


def test_the_cpu_path_uses_the_host_clock():
    assert isinstance(hooks.make_clock(torch.device("cpu")), hooks.HostClock)
    assert hooks.HostClock().seconds([1, 2.5]) == [1.0, 2.5]


@pytest.fixture(scope="module")
def hook_runs():
    from _dist_workers import hook_runs as worker

    return cdist.launch(worker, 2, STEPS, backend="gloo", quiet=True, timeout_s=scaled(600))


@pytest.mark.slow
def test_the_recorder_trains_as_torchs_own_hooks_and_counts_the_bytes_sent(hook_runs):
    out = hook_runs[0]
    # DDP's built-in average, torch's allreduce_hook and the recorder: the same parameters
    assert torch.allclose(out["recorder none"], out["no hook"], rtol=0, atol=1e-7)
    assert torch.equal(out["recorder none"], out["torch allreduce_hook"])
    # the recorder's fp16 (torch's fp16_compress_wrapper around it) is torch's fp16_compress_hook bit for bit
    assert torch.equal(out["recorder fp16"], out["torch fp16_compress_hook"])
    assert not torch.equal(out["recorder fp16"], out["recorder none"])  # fp16 did round something
    n = out["num_params"]
    assert out["recorder none bytes"] == STEPS * n * 4 and out["recorder none dtypes"] == ["float32"]
    assert out["recorder fp16 bytes"] == STEPS * n * 2 and out["recorder fp16 dtypes"] == ["float16"]
    assert out["recorder bf16 bytes"] == STEPS * n * 2 and out["recorder bf16 dtypes"] == ["bfloat16"]
    assert out["recorder none calls"] > STEPS  # several buckets per step
    assert out["recorder fp16 in flight"] > 0
    u = out["recorder fp16 underflow"]
    assert 0 < u["nonzero_sent"] <= u["nonzero"]
    for rank_out in hook_runs:  # both ranks hold the same parameters
        assert torch.equal(rank_out["recorder fp16"], out["recorder fp16"])


@pytest.mark.slow
def test_ddp_refuses_torchs_bf16_hook_by_the_build_of_torch_not_the_backend(hook_runs):
    out = hook_runs[0]
    assert out["refusal none"] is None and out["refusal fp16"] is None
    cuda_build = torch.version.cuda is not None and torch.distributed.is_nccl_available()
    if cuda_build:
        assert out["refusal bf16"] is None
    else:  # torch 2.13's rule (DistributedDataParallel._check_comm_hook): CUDA + NCCL >= 2.10, or XPU + XCCL
        assert "NCCL" in out["refusal bf16"]
    assert out["gloo reduces fp16"] and out["gloo reduces bf16"]  # gloo itself sums both on the CPU


def test_data_parallel_times_nccl_ranks_with_cuda_events_like_gloo_ranks(monkeypatch):
    """DataParallel on a GPU rank (faked): the same recorder as on CPU ranks, with CUDA events, and
    comm_time_s is the union of the buckets' intervals -- no DDP logging data, no GPU needed."""
    from course_lib.parallel import data_parallel

    registered = []

    class FakeDDP:
        def __init__(self, model, device_ids=None, **kw):
            self.device_ids = device_ids

        def register_comm_hook(self, state, hook):
            registered.append(hook)

    monkeypatch.setattr(data_parallel, "DistributedDataParallel", FakeDDP)
    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(hooks.dist, "all_reduce", lambda t, group=None, async_op=False: _Work(t))
    _FakeEvent.ticks = 0.0
    par = data_parallel.DataParallel(8, None, torch.device("cuda", 0))
    par.distributed, par.rank, par.world_size = True, 0, 2  # as inside a 2-rank NCCL group
    ddp = par.wrap(torch.nn.Linear(2, 2))
    assert ddp.device_ids == [0] and registered == [par.recorder.hook]
    assert par.comm_method == "timed: every bucket's all-reduce (CUDA events)"
    for _ in range(3):  # three buckets, each one fake tick (2.5 ms) from ready to done, one after the other
        par.recorder.hook(_Group(), _Bucket(torch.ones(4))).wait()
    assert par.comm_time_s == pytest.approx(3 * 2.5e-3)
