"""This machine against its specification: microbenchmarks of the numbers a step model needs (lesson 09).

* **matmul throughput** per size and dtype: ``n x n @ n x n`` timed, FLOP/s = ``2 n^3 / t``;
  the maximum over sizes is the *achievable* peak (the idea of ml-engineering's MAMF finder),
  the whole curve is what small operations get;
* **memory bandwidth** per transfer size: ``dst.copy_(src)`` moves ``2 x size`` bytes (a read
  and a write); the largest size is device memory, small ones stay in cache;
* **host-to-device** bandwidth (GPUs only): a pinned host tensor copied to the device;
* **per-operation overhead**: the time of an operation on a one-element tensor, with autograd
  (the dispatcher, the autograd graph, on a GPU the kernel launch): what every operation of a
  step pays however small it is.

On a GPU each timing is bracketed by CUDA events (:func:`_timed`); on a CPU by the host clock.
The curves go to :mod:`.model`, the peaks to :func:`.peaks.band`.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from ..tables import Table
from .peaks import BANDS, band, find_reference

DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _timed(fn, device: torch.device, repeats: int) -> float:
    """Seconds per call of ``fn``: the median of ``repeats`` calls (after one untimed). The median, as
    for the steps lesson 09 measures: on a shared machine both see the same load, and a call that
    another process interrupted does not move it. CUDA: an event pair per call."""
    fn()
    times = []
    for _ in range(max(1, repeats)):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def matmul_flops(n: int, dtype: str = "fp32", device="cpu", repeats: int = 3) -> float:
    """FLOP/s of one ``n x n @ n x n`` matmul in ``dtype`` (``"tf32"``: fp32 with TensorFloat-32 allowed)."""
    device = torch.device(device)
    a = torch.randn(n, n, device=device, dtype=DTYPES[dtype])
    b = torch.randn(n, n, device=device, dtype=DTYPES[dtype])
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    try:
        t = _timed(lambda: torch.mm(a, b), device, repeats)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
    return 2 * n**3 / t


def copy_bandwidth(n_bytes: int, device="cpu", repeats: int = 5) -> float:
    """Bytes/s of ``dst.copy_(src)`` for ``n_bytes`` of fp32: ``2 n_bytes`` moved (read + write)."""
    device = torch.device(device)
    count = max(1, n_bytes // 4)
    src = torch.randn(count, device=device)
    dst = torch.empty_like(src)
    return 2 * count * 4 / _timed(lambda: dst.copy_(src), device, repeats)


def h2d_bandwidth(n_bytes: int = 256 * 2**20, device="cuda", repeats: int = 5) -> float:
    """Bytes/s of a pinned host tensor copied to ``device`` (a GPU; the caller checks there is one)."""
    device = torch.device(device)
    src = torch.empty(max(1, n_bytes // 4), pin_memory=True)
    dst = torch.empty_like(src, device=device)
    return src.numel() * 4 / _timed(lambda: dst.copy_(src, non_blocking=True), device, repeats)


def op_overhead(device="cpu", ops: int = 200, repeats: int = 5) -> float:
    """Seconds per operation of a step on tiny tensors: ``ops`` multiplies on one element forward,
    their backward (one op each), so ``2 ops`` operations in all; the time is almost all overhead."""
    device = torch.device(device)
    x = torch.ones(1, device=device, requires_grad=True)

    def chain():
        y = x
        for _ in range(ops):
            y = y * 1.0001
        y.backward()

    return _timed(chain, device, repeats) / (2 * ops)


@dataclass
class DeviceCurves:
    """What the step model needs from the probe: throughput vs operation size, and the overhead.

    ``matmul``: (flops of one matmul, FLOP/s) pairs, sorted; ``copy``: (bytes moved, bytes/s);
    both are interpolated on log-log axes and held flat beyond their ends."""

    device: str
    matmul: list[tuple[float, float]]
    copy: list[tuple[float, float]]
    overhead_s: float
    threads: int = 1

    @property
    def peak_flops(self) -> float:
        return max(f for _, f in self.matmul)

    @property
    def peak_bandwidth(self) -> float:
        """The best copy bandwidth at any size (small copies may run from cache)."""
        return max(b for _, b in self.copy)

    @property
    def memory_bandwidth(self) -> float:
        """The copy bandwidth at the largest size measured: device memory, past the caches."""
        return max(self.copy)[1]

    def flops_at(self, flops: float) -> float:
        """Achievable FLOP/s for an operation of ``flops`` (the matmul curve, interpolated)."""
        return _interp(self.matmul, flops)

    def bandwidth_at(self, n_bytes: float) -> float:
        """Achievable bytes/s for an operation moving ``n_bytes`` (the copy curve, interpolated)."""
        return _interp(self.copy, n_bytes)

    def to_dict(self) -> dict:
        return {"device": self.device, "matmul": self.matmul, "copy": self.copy, "overhead_s": self.overhead_s,
                "threads": self.threads}

    @classmethod
    def from_dict(cls, d: dict) -> "DeviceCurves":
        return cls(d["device"], [tuple(p) for p in d["matmul"]], [tuple(p) for p in d["copy"]], d["overhead_s"],
                   d.get("threads", 1))


def _interp(points, x: float) -> float:
    xs = np.log([p[0] for p in points])
    ys = np.log([p[1] for p in points])
    return float(np.exp(np.interp(np.log(max(x, 1.0)), xs, ys)))


@dataclass
class HardwareProbe:
    """One probe of this machine: the curves, the matmul maximum per dtype, H2D, and the device's name."""

    device_name: str
    curves: DeviceCurves
    matmul_by_dtype: dict = field(default_factory=dict)  # dtype -> (best FLOP/s, at size n)
    h2d_Bps: float | None = None
    allreduce_busbw_Bps: float | None = None  # from lesson 08's fit / this lesson's launch

    def rows(self, reference=None) -> list[dict]:
        """Measured value, reference peak, fraction and band per measurement."""
        ref = reference if reference is not None else find_reference(self.device_name)
        out = []
        for dtype, (flops, n) in self.matmul_by_dtype.items():
            peak = ref.flops.get(dtype) if ref else None
            frac, where = band("matmul", flops, peak)
            out.append({"measurement": f"matmul {dtype} (best, n = {n})", "measured": flops / 1e12, "unit": "TFLOP/s",
                        "peak": peak and peak / 1e12, "fraction": frac, "band from": BANDS["matmul"][0],
                        "band": where})
        frac, where = band("memory", self.curves.memory_bandwidth, ref and ref.memory_bandwidth)
        largest = max(self.curves.copy)[0] / 2
        out.append({"measurement": f"memory copy ({largest / 2**20:.0f} MiB)",
                    "measured": self.curves.memory_bandwidth / 1e9,
                    "unit": "GB/s", "peak": ref and ref.memory_bandwidth / 1e9, "fraction": frac,
                    "band from": BANDS["memory"][0], "band": where})
        if self.h2d_Bps is not None:
            frac, where = band("h2d", self.h2d_Bps, ref and ref.pcie_bandwidth)
            out.append({"measurement": "host to device (pinned)", "measured": self.h2d_Bps / 1e9, "unit": "GB/s",
                        "peak": ref and ref.pcie_bandwidth / 1e9, "fraction": frac, "band from": BANDS["h2d"][0],
                        "band": where})
        if self.allreduce_busbw_Bps is not None:
            out.append({"measurement": "all-reduce busbw (lesson 08's fit)", "measured": self.allreduce_busbw_Bps / 1e9,
                        "unit": "GB/s", "peak": None, "fraction": None, "band from": None, "band": "measured only"})
        out.append({"measurement": "per-operation overhead", "measured": self.curves.overhead_s * 1e6, "unit": "us",
                    "peak": None, "fraction": None, "band from": None, "band": "measured only"})
        return out

    def table(self, reference=None) -> Table:
        t = Table(["measurement", "measured", "unit", "peak", "fraction", "band from", "band"],
                  title=f"{self.device_name} against its specification ({self.curves.threads} thread(s))")
        for r in self.rows(reference):
            t.add(**{**r, "peak": "-" if r["peak"] is None else r["peak"],
                     "fraction": "-" if r["fraction"] is None else f"{r['fraction']:.0%}",
                     "band from": "-" if r["band from"] is None else f"{r['band from']:.0%}"})
        return t

    def summary(self) -> str:
        """One line (lesson 00 shows it): the worst fraction of peak, or the measured figures on a CPU."""
        rows = [r for r in self.rows() if r["fraction"] is not None]
        if not rows:
            best = max(self.matmul_by_dtype.values())[0] if self.matmul_by_dtype else self.curves.peak_flops
            return (f"{self.device_name}: matmul {best / 1e9:.1f} GFLOP/s, memory copy "
                    f"{self.curves.memory_bandwidth / 1e9:.1f} GB/s (measured; no reference peak)")
        worst = min(rows, key=lambda r: r["fraction"])
        return (f"{self.device_name}: lowest of peak: {worst['measurement']} at {worst['fraction']:.0%} "
                f"({worst['band']})")


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    from ..hardware import cpu_info  # noqa: PLC0415 (the CPU's model name)

    return cpu_info()[0]


def probe_hardware(device=None, *, matmul_sizes=None, copy_sizes=None,
                   dtypes=None, repeats: int = 3, h2d: bool = True) -> HardwareProbe:
    """Run the microbenchmarks on ``device`` (default: the GPU if any, else the CPU) at this process's threads.

    Default sizes: matmuls 64..1024 on a CPU, 256..8192 on a GPU (a GPU needs large matrices to
    approach its peak: the MAMF finder searches around 4k-16k); copies 4 KiB..64 MiB on a CPU, to
    1 GiB on a GPU (far beyond its last-level cache)."""
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    gpu = device.type == "cuda"
    if matmul_sizes is None:
        matmul_sizes = (256, 512, 1024, 2048, 4096, 8192) if gpu else (64, 128, 256, 512, 1024)
    if copy_sizes is None:
        copy_sizes = [2**k for k in range(12, 31 if gpu else 27, 2)]
    if dtypes is None:
        dtypes = ["fp32", "tf32", "bf16", "fp16"] if device.type == "cuda" else ["fp32"]
    matmul = sorted((2.0 * n**3, matmul_flops(n, "fp32", device, repeats)) for n in matmul_sizes)
    by_dtype = {"fp32": max((f, round((m / 2) ** (1 / 3))) for m, f in matmul)}
    for dt in dtypes:
        if dt != "fp32":
            by_dtype[dt] = max((matmul_flops(n, dt, device, repeats), n) for n in matmul_sizes)
    copy = sorted((2.0 * max(4, s // 4 * 4), copy_bandwidth(s, device, repeats + 2)) for s in copy_sizes)
    curves = DeviceCurves(str(device.type), matmul, copy, op_overhead(device, repeats=repeats),
                          torch.get_num_threads())
    h2d_bps = h2d_bandwidth(device=device) if (h2d and device.type == "cuda") else None
    return HardwareProbe(device_name(device), curves, by_dtype, h2d_bps)
