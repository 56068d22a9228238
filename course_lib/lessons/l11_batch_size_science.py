"""Lesson 11, the science of the batch size; the notebook imports this module as ``study``. Each section's code
is a module of its own, gathered here:

    l11_noise_scale.py      section 1: B_simple during training (NeuMF, BERT)
    l11_critical_batch.py   section 2: the tuned sweep, the critical batch, B_simple against it
    l11_sharpness.py        sections 3-4: sharpness against the gap, growing the batch
    l11_adaptive.py         the batch from the noise scale
    l11_scaling.py          predictable scaling
    l11_batchnorm.py        section 5: BatchNorm with few samples per rank

The estimators are :mod:`course_lib.batch_science`; every verdict is a :class:`course_lib.compare.Comparison`.
"""

from __future__ import annotations

from .l11_adaptive import *  # noqa: F403
from .l11_batchnorm import *  # noqa: F403
from .l11_critical_batch import *  # noqa: F403
from .l11_noise_scale import *  # noqa: F403
from .l11_scaling import *  # noqa: F403
from .l11_sharpness import *  # noqa: F403
