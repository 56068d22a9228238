"""Performance: this machine against its specification, and a Paleo-style model of a training step (lesson 09).

- :mod:`.peaks` — reference peaks of the accelerators learners meet (each with its source),
  and the bands a measurement is read against (:func:`.peaks.band`).
- :mod:`.probe` — microbenchmarks: matmul throughput over sizes and dtypes, memory bandwidth
  over transfer sizes, host-to-device bandwidth (GPUs), the per-operation overhead.
- :mod:`.model` — the step model: every operation of a real step counted (FLOPs, bytes),
  priced by the roofline of the probe's curves plus the per-op overhead; DDP's bucketed
  all-reduce overlapped with backward; the data term; scaling to many devices.

Pure arithmetic is separate from measuring, so tests check the formulas by hand and feed
the bands simulated GPUs.
"""

from .model import (
    OpCost,
    StepCounts,
    StepPrediction,
    bucket_overlap,
    count_step,
    ddp_buckets,
    predict_step,
    roofline_time,
    scaling_curve,
)
from .peaks import BANDS, REFERENCE_PEAKS, band, find_reference
from .probe import DeviceCurves, HardwareProbe, probe_hardware
