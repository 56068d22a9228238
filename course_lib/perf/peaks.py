"""Reference peaks of the accelerators learners meet, and the bands a measurement is read against (lesson 09).

Quoted, never measured here. Every figure is the **dense** peak (datasheets print tensor-core
figures "with sparsity", twice the dense one; those are halved here), in FLOP/s and bytes/s
(1e12 and 1e9 as the datasheets count). ``None``: the device has no such mode (V100 has no
bf16 or tf32 tensor cores; MI250X has no tf32). CPUs have no entry: they are measured only.

A measurement is shown as a fraction of its peak, beside its band (:func:`band`). The lower edges of the
bands are the course's choice, set from what well-run nodes are reported to reach:

* dense matmul: the best achievable matmul (ml-engineering's "Maximum Achievable Matmul
  FLOPS" finder, Stas Bekman, github.com/stas00/ml-engineering, compute/accelerator) lands
  at roughly 70-90 % of the dense datasheet peak on NVIDIA A100/H100, lower on some AMD
  parts; below 60 % something on the node is wrong;
* device memory: a large copy (STREAM-like) reaches about 80-90 % of the HBM peak;
* host-to-device: pinned copies reach about 80 % of the PCIe link (PCIe 4.0 x16: 32 GB/s
  raw, about 25 GB/s measured; PCIe 5.0 x16: 64 GB/s raw);
* all-reduce: nccl-tests' bus bandwidth on NVLink nodes reaches most of the per-direction
  NVLink figure for large messages (NVIDIA nccl-tests, doc/PERFORMANCE.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..tables import Table

T = 1e12  # datasheets' TFLOPS
G = 1e9  # and GB/s


@dataclass(frozen=True)
class Reference:
    name: str
    flops: dict  # dtype -> dense peak FLOP/s (None: no such mode)
    memory_bandwidth: float  # bytes/s
    # bytes/s per direction, raw, of the x16 PCIe generation the datasheet names (3: 16, 4: 32, 5: 64 GB/s)
    pcie_bandwidth: float
    source: str


def _r(name, fp32, tf32, bf16, fp16, mem_gbs, pcie_gbs, source):
    return Reference(name, {"fp32": fp32 * T, "tf32": tf32 and tf32 * T, "bf16": bf16 and bf16 * T,
                            "fp16": fp16 and fp16 * T}, mem_gbs * G, pcie_gbs * G, source)


# What the course assumes of a GPU it has not measured (lesson 09's node prediction, lesson 08's links): the
# share of the datasheet peaks reached at every size, and a kernel launch plus the dispatcher per operation.
GPU_PEAK_SHARE = 0.8
GPU_OP_OVERHEAD_S = 5e-6

REFERENCE_PEAKS = {r.name: r for r in [
    _r("V100 SXM2", 15.7, None, None, 125, 900, 16, "NVIDIA Tesla V100 datasheet (SXM2; fp16 = tensor cores)"),
    _r("A100 40GB SXM", 19.5, 156, 312, 312, 1555, 32, "NVIDIA A100 Tensor Core GPU datasheet (dense figures)"),
    _r("A100 80GB SXM", 19.5, 156, 312, 312, 2039, 32, "NVIDIA A100 Tensor Core GPU datasheet (dense figures)"),
    _r("H100 SXM", 67, 494.5, 989.5, 989.5, 3350, 64,
       "NVIDIA H100 Tensor Core GPU datasheet (sparsity figures halved)"),
    _r("H100 PCIe", 51, 378, 756, 756, 2000, 64, "NVIDIA H100 Tensor Core GPU datasheet (sparsity figures halved)"),
    _r("H200", 67, 494.5, 989.5, 989.5, 4800, 64,
       "NVIDIA H200 Tensor Core GPU datasheet (SXM; sparsity figures halved)"),
    _r("L40S", 91.6, 183, 362, 362, 864, 32, "NVIDIA L40S datasheet (sparsity figures halved)"),
    _r("MI250X", 47.9, None, 383, 383, 3277, 32,
       "AMD Instinct MI250X datasheet (fp32 vector; fp32 matrix is 95.7)"),
]}

# What a device name reported by nvidia-smi / torch contains -> the table's entry (first match).
_NAME_KEYS = [("H200", "H200"), ("H100 PCIe", "H100 PCIe"), ("H100", "H100 SXM"), ("A100-SXM4-80GB", "A100 80GB SXM"),
              ("A100 80GB", "A100 80GB SXM"), ("A100", "A100 40GB SXM"), ("V100", "V100 SXM2"), ("L40S", "L40S"),
              ("MI250X", "MI250X")]


def find_reference(device_name: str) -> Reference | None:
    """The table's entry for a device name as the driver reports it ("NVIDIA H100 80GB HBM3"), or None."""
    upper = device_name.upper()
    for key, entry in _NAME_KEYS:
        if key.upper() in upper or key.upper().replace(" ", "-") in upper:
            return REFERENCE_PEAKS[entry]
    return None


# measurement kind -> (fraction from which a node is "as well-run nodes reach", where the range comes from,
# what to check when below it)
BANDS = {
    "matmul": (0.60, "ml-engineering's MAMF table: ~70-90 % of the dense peak on A100/H100",
               "GPU clocks throttled (nvidia-smi -q -d CLOCK,PERFORMANCE: power or thermal cap), another job on "
               "the GPU (nvidia-smi), tf32 off when fp32 is compared with the tf32 peak, a matrix too small"),
    "memory": (0.70, "a STREAM-like copy reaches ~80-90 % of the HBM peak",
               "memory clocks, ECC/row-remapping errors, another job on the GPU, a copy too small to stream"),
    "h2d": (0.60, "pinned host-to-device copies reach ~80 % of the PCIe link",
            "PCIe generation or width (nvidia-smi -q | grep -A3 'Link'), pageable instead of pinned memory, "
            "the GPU on the other CPU socket (numactl)"),
    "allreduce": (0.60, "nccl-tests busbw on NVLink reaches most of the per-direction link bandwidth",
                  "NCCL fell back to sockets (NCCL_DEBUG=INFO says NET/Socket), P2P disabled "
                  "(NCCL_P2P_DISABLE), another job on the link"),
}


NO_PEAK, ABOVE_PEAK, IN_BAND, BELOW_BAND = "no peak", "above the peak", "in the band", "below the band"


def band(kind: str, measured: float, peak: float | None) -> tuple[float | None, str]:
    """``(fraction of peak, where it falls)`` for one measurement, where is one of :data:`NO_PEAK` (a CPU, an
    unknown device: measured only), :data:`ABOVE_PEAK` (more than 5 % over: the wrong entry or the wrong mode's
    peak), :data:`IN_BAND` (from the band's lower edge, :data:`BANDS`) or :data:`BELOW_BAND` (check the node:
    the band's causes). Columns of the probe's table; the band's edges are quoted, not measured here."""
    if kind not in BANDS:
        raise ValueError(f"unknown measurement kind {kind!r}; choose one of {tuple(BANDS)}")
    if not peak:
        return None, NO_PEAK
    frac = measured / peak
    if frac > 1.05:
        return frac, ABOVE_PEAK
    return frac, IN_BAND if frac >= BANDS[kind][0] else BELOW_BAND


def reference_table() -> Table:
    """The reference peaks, dense, in TFLOP/s and GB/s, with their sources."""
    t = Table(["device", "fp32", "tf32", "bf16", "fp16", "memory (GB/s)", "source"],
              title="reference peaks (quoted, dense; TFLOP/s)")
    for r in REFERENCE_PEAKS.values():
        t.add(device=r.name,
              **{d: "-" if r.flops[d] is None else r.flops[d] / T for d in ("fp32", "tf32", "bf16", "fp16")},
              **{"memory (GB/s)": r.memory_bandwidth / G, "source": r.source})
    return t
