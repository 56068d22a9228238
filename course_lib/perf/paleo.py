"""Paleo's inputs and its communication schemes, and lesson 09's step model driven by them (lesson 09).

Paleo (Qi, Sparks & Talwalkar, "Paleo: A Performance Model for Deep Neural Networks", ICLR 2017;
code github.com/TalwalkarLab/paleo) prices a data-parallel step as compute + communication:

* **compute**: each layer's FLOPs at the device's peak, plus the bytes it reads and writes at the
  device's memory bandwidth, both scaled by the *platform percent of peak* for computation
  (``ppp_comp``: what the software stack reaches of the datasheet; Paleo fits it per framework);
* **communication**: the model's weights sent over one link of ``bandwidth x ppp_comm`` as many
  times as the scheme needs (:data:`SCHEMES`); nothing of it overlaps the compute.

Here the compute is the course's own (:mod:`.model`): every operation of a real training step of a
``torch.nn.Module`` counted on PyTorch's ``meta`` device
(:func:`course_lib.lessons.l09_paleo.count_module_step`: shapes, no values, so AlexNet
at batch 2048 counts in a second and no memory), priced by the roofline
``max(flops / F, bytes / B)`` on a device given by its specification sheet (:class:`SpecDevice`).
Paleo *adds* the two terms of each layer (``combine="sum"`` reproduces that); the roofline takes
the larger (the default). The communication is priced by Paleo's formulas, beside the course's ring.

The facts below are Paleo's (``paleo/device.py``, read 2026-12-01 at commit 984bbf5), each with
the datasheet it restates; none of Paleo's code is used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace


from ..comm import cost
from . import model as M


@dataclass(frozen=True)
class SpecDevice:
    """A device from its specification sheet: peak FLOP/s and memory bandwidth (bytes/s), and the
    fraction of both the software reaches (Paleo's PPP for computation)."""

    name: str
    peak_flops: float
    memory_bandwidth: float
    ppp_comp: float = 1.0
    source: str = ""

    def __post_init__(self):
        if not (self.peak_flops > 0 and self.memory_bandwidth > 0):
            raise ValueError(f"device {self.name!r}: peak_flops and memory_bandwidth must be positive, got "
                             f"{self.peak_flops!r} and {self.memory_bandwidth!r}")
        if not 0 < self.ppp_comp <= 1:
            raise ValueError(f"device {self.name!r}: ppp_comp={self.ppp_comp!r}; the platform percent of peak "
                             "is a fraction in (0, 1] (Paleo's AlexNet case uses 0.62)")

    @property
    def flops(self) -> float:
        """Sustained FLOP/s: the peak times PPP."""
        return self.peak_flops * self.ppp_comp

    @property
    def bandwidth(self) -> float:
        """Sustained memory bytes/s: Paleo scales memory traffic by the same PPP as compute."""
        return self.memory_bandwidth * self.ppp_comp

    @property
    def ridge(self) -> float:
        """FLOPs per byte above which an operation is compute-bound on this device (the roofline's ridge)."""
        return self.peak_flops / self.memory_bandwidth


@dataclass(frozen=True)
class SpecNetwork:
    """A link from its specification: bandwidth in bytes/s per direction, and Paleo's PPP for communication."""

    name: str
    bandwidth: float
    ppp_comm: float = 1.0
    alpha_s: float = 0.0  # Paleo has no latency term; kept for the course's ring and the what-if
    source: str = ""

    def __post_init__(self):
        if not self.bandwidth > 0:
            raise ValueError(f"network {self.name!r}: bandwidth must be positive bytes/s, got {self.bandwidth!r}")
        if not 0 < self.ppp_comm <= 1:
            raise ValueError(f"network {self.name!r}: ppp_comm={self.ppp_comm!r}; a fraction in (0, 1] "
                             "(Paleo's AlexNet case uses 1.0, its Inception case 0.72)")

    @property
    def beta(self) -> float:
        """Seconds per byte through the link at PPP."""
        return 1.0 / (self.bandwidth * self.ppp_comm)


GFLOPS, GBps, Gbps = 1e9, 1e9, 1e9 / 8

_DEV_SRC = "Paleo paleo/device.py; NVIDIA's datasheet single-precision peak and memory bandwidth"
# Single precision, NVIDIA's figures as Paleo quotes them. The K80 is a board of two GK210 chips:
# 5.6 TFLOP/s (base clock 560 MHz) and 480 GB/s are the board's, and Paleo takes the board as one device.
PALEO_DEVICES = {d.name: d for d in [
    SpecDevice("K20", 3520 * GFLOPS, 208 * GBps, source=_DEV_SRC + " (Tesla K20)"),
    SpecDevice("K20X", 3935 * GFLOPS, 250 * GBps, source=_DEV_SRC + " (Tesla K20X)"),
    SpecDevice("K40", 4290 * GFLOPS, 288 * GBps, source=_DEV_SRC + " (Tesla K40, base clock 745 MHz)"),
    SpecDevice("K80", 5600 * GFLOPS, 480 * GBps, source=_DEV_SRC + " (Tesla K80 board: two GK210, base clock)"),
    SpecDevice("TITAN_X", 6144 * GFLOPS, 336.5 * GBps, source=_DEV_SRC + " (GeForce GTX TITAN X, Maxwell)"),
]}

# Link speeds as Paleo states them (device.py): Ethernet in Gbit/s, PCIe x16 in GB/s per direction.
PALEO_NETWORKS = {n.name: n for n in [
    SpecNetwork("ethernet", 10 * Gbps, source="Paleo paleo/device.py: 10 Gbit/s Ethernet"),
    SpecNetwork("ethernet20", 20 * Gbps, source="Paleo paleo/device.py: 20 Gbit/s Ethernet (the fastest EC2 "
                                                 "offered, as the seed talk says)"),
    SpecNetwork("infiniband", 70 * Gbps, source="Paleo paleo/device.py: InfiniBand at 70 Gbit/s (its figure; FDR "
                                                 "4x is 56, EDR 4x 100)"),
    SpecNetwork("pcie2", 8 * GBps, source="Paleo paleo/device.py: PCIe 2.0 x16, 500 MB/s per lane per direction "
                                           "(it notes the one-weird-trick paper measured 6 GB/s)"),
    SpecNetwork("pcie3", 16 * GBps, source="Paleo paleo/device.py: PCIe 3.0 x16, 1 GB/s per lane per direction"),
]}


def paleo_device(name: str, ppp_comp: float = 1.0) -> SpecDevice:
    """One of :data:`PALEO_DEVICES` by name, at ``ppp_comp``."""
    if name not in PALEO_DEVICES:
        raise ValueError(f"device {name!r} is not one of Paleo's: choose one of {sorted(PALEO_DEVICES)}, or build "
                         "a SpecDevice(name, peak_flops, memory_bandwidth, ppp_comp) from its datasheet")
    return replace(PALEO_DEVICES[name], ppp_comp=ppp_comp)


def paleo_network(name: str, ppp_comm: float = 1.0) -> SpecNetwork:
    """One of :data:`PALEO_NETWORKS` by name, at ``ppp_comm``."""
    if name not in PALEO_NETWORKS:
        raise ValueError(f"network {name!r} is not one of Paleo's: choose one of {sorted(PALEO_NETWORKS)}, or build "
                         "a SpecNetwork(name, bandwidth_bytes_per_s, ppp_comm)")
    return replace(PALEO_NETWORKS[name], ppp_comm=ppp_comm)


# --------------------------------------------------------------------------- Paleo's communication schemes


def _check_workers(p) -> int:
    if isinstance(p, bool) or not isinstance(p, int) or p < 1:
        raise ValueError(f"workers must be an int >= 1, got {p!r}")
    return p


def tree_height(p: int) -> int:
    """``ceil(log2 p)``: the depth of a binary tree over ``p`` workers (Paleo's ``tree_height``)."""
    return (_check_workers(p) - 1).bit_length()


def one_to_all_time(n_bytes: float, p: int, net: SpecNetwork) -> float:
    """Parameter server on one node: it receives ``p - 1`` gradients and sends ``p - 1`` models through
    its one link, ``2 (p-1) n / B``. Paleo's ``OneToAll``: bottlenecked by the master's bandwidth."""
    return 2 * (_check_workers(p) - 1) * n_bytes * net.beta


def tree_allreduce_time(n_bytes: float, p: int, net: SpecNetwork) -> float:
    """Reduce up a binary tree and broadcast back down: ``2 ceil(log2 p)`` full messages, ``2 ceil(log2 p) n / B``."""
    return 2 * tree_height(p) * n_bytes * net.beta


def butterfly_allreduce_time(n_bytes: float, p: int, net: SpecNetwork) -> float:
    """Butterfly (recursive doubling): ``ceil(log2 p)`` rounds, each swapping the full message with a
    partner, ``ceil(log2 p) n / B``. Paleo calls it optimal; it is among schemes that send whole messages
    (the ring below sends ``2 (p-1)/p`` of one, whatever ``p``). The course's textbook version with
    latency and a non-power-of-two fix-up is :func:`course_lib.comm.cost.butterfly_allreduce_time`."""
    return tree_height(p) * n_bytes * net.beta


def butterfly_mixing_time(n_bytes: float, p: int, net: SpecNetwork) -> float:
    """Butterfly mixing (Zhao & Canny 2013): one butterfly round per step, the others' gradients mixed
    in over later steps: one message, ``n / B``. (Paleo prices one message even for one worker; here a
    single worker sends nothing.)"""
    return 0.0 if _check_workers(p) == 1 else n_bytes * net.beta


def ring_allreduce_time(n_bytes: float, p: int, net: SpecNetwork) -> float:
    """The course's bandwidth-optimal ring (lesson 08), on the same link: ``2 (p-1) alpha + 2 (p-1)/p n / B``."""
    return cost.ring_allreduce_time(n_bytes, _check_workers(p), net.alpha_s, net.beta)


# the keys of the CLI's JSON ("comm_ms") first: the three schemes of Paleo's figures
SCHEMES = {"one_to_all": one_to_all_time, "tree_all_reduce": tree_allreduce_time,
           "butterfly_all_reduce": butterfly_allreduce_time, "butterfly_mixing": butterfly_mixing_time,
           "ring_all_reduce": ring_allreduce_time}
JSON_SCHEMES = ("one_to_all", "tree_all_reduce", "butterfly_all_reduce")


# --------------------------------------------------------------------------- counting any module's step


# --------------------------------------------------------------------------- pricing on a specification sheet


def op_seconds(op: M.OpCost, device: SpecDevice, combine: str = "max") -> float:
    """One counted operation on ``device``: the roofline (``"max"``) or Paleo's sum of the two terms (``"sum"``)."""
    if combine == "max":
        return M.roofline_time(op.flops, op.bytes, device.flops, device.bandwidth)
    if combine == "sum":
        return op.flops / device.flops + op.bytes / device.bandwidth
    raise ValueError(f"combine={combine!r}; choose 'max' (the roofline) or 'sum' (Paleo's compute + memory)")


def spec_curves(device: SpecDevice, overhead_s: float = 0.0):
    """``device`` as the probe's :class:`.probe.DeviceCurves` (flat: the sustained FLOP/s and bytes/s at every
    size), so lesson 09's :func:`.model.predict_step`, :func:`.model.scaling_curve` and the what-if widget
    price a datasheet device as they price the probed one."""
    from .probe import DeviceCurves  # noqa: PLC0415

    return DeviceCurves(device.name, [(1.0, device.flops), (1e18, device.flops)],
                        [(1.0, device.bandwidth), (1e15, device.bandwidth)], overhead_s, 0)


def phase_seconds(counts: M.StepCounts, device: SpecDevice, combine: str = "max") -> dict[str, float]:
    """``{"forward", "backward", "update"}`` seconds of a counted step (the loss counts as forward)."""
    out = {"forward": 0.0, "backward": 0.0, "update": 0.0}
    for o in counts.ops:
        key = {"backward": "backward", "optimizer": "update"}.get(o.phase, "forward")
        out[key] += op_seconds(o, device, combine)
    return out


def scaling_rows(a: M.StepCounts, b: M.StepCounts, device: SpecDevice, network: SpecNetwork, *, batch: int,
                 workers, scaling: str = "strong", combine: str = "max", schemes=tuple(SCHEMES)) -> list[dict]:
    """Paleo's scaling table from two counted steps (any batch is :func:`.model.interpolate`-d from them).

    ``scaling="strong"``: the global ``batch`` fixed, ``ceil(batch / p)`` per worker (Paleo rounds up);
    ``"weak"``: ``batch`` per worker. Each row: workers, batch per worker, forward / backward / update /
    compute ms, each scheme's communication ms (the gradients: ``a.grad_bytes``), and each scheme's
    speedup over one worker: ``T(1) / T(p)`` strong, ``p T(1) / T(p)`` weak (throughput), where
    ``T = compute + communication`` (Paleo overlaps nothing)."""
    if scaling not in ("strong", "weak"):
        raise ValueError(f"scaling={scaling!r}; "
                         "choose 'strong' (fixed global batch) or 'weak' (fixed batch per worker)")
    for s in schemes:
        if s not in SCHEMES:
            raise ValueError(f"scheme {s!r}; choose from {tuple(SCHEMES)}")
    workers = [_check_workers(p) for p in workers]
    if not workers:
        raise ValueError("workers is empty: give worker counts such as 1,2,4,8")
    grad_bytes = a.grad_bytes
    rows, t1 = [], None
    for p in workers:
        per = math.ceil(batch / p) if scaling == "strong" else batch
        counts = a if per == a.batch else b if per == b.batch else M.interpolate(a, b, per)
        ph = phase_seconds(counts, device, combine)
        compute = sum(ph.values())
        if t1 is None:
            c1 = M.interpolate(a, b, batch) if batch not in (a.batch, b.batch) else (a if batch == a.batch else b)
            t1 = sum(phase_seconds(c1, device, combine).values())
        comm = {s: SCHEMES[s](grad_bytes, p, network) for s in schemes}
        work = 1 if scaling == "strong" else p
        rows.append({"workers": p, "batch_per_worker": per, "forward_ms": ph["forward"] * 1e3,
                     "backward_ms": ph["backward"] * 1e3, "update_ms": ph["update"] * 1e3,
                     "compute_ms": compute * 1e3, "comm_ms": {s: c * 1e3 for s, c in comm.items()},
                     "speedup": {s: work * t1 / (compute + c) for s, c in comm.items()}})
    return rows
