"""Exercise checks: the learner's code against course_lib's own implementation (exercises/, solutions/).

Every exercise notebook ends with a cell like ``checks.check_ndcg(ndcg_at_k)``. A check
runs the learner's function on several cases, edge cases included (zero norms,
overflowing gradients, tensor lengths that do not split evenly across ranks), compares
each answer with the course's reference (the code in ``course_lib`` the lessons use,
or PyTorch's own ``GradScaler`` and ``all_reduce``) and returns a ``CheckResult``:
``.passed``, ``.message`` (which case differs, expected vs got, and a hint when the
difference looks like a known mistake), shown as text or HTML in the notebook.

- A function that still raises ``NotImplementedError`` (the exercise stub) is reported
  as "not implemented yet", never as a crash of the check.
- With ``COURSE_CHECKS_STRICT=1`` in the environment, a check that does not pass raises
  ``CheckFailed`` (an ``AssertionError``): CI runs the solutions that way, so a solution
  that stops passing its own check fails the build.

The checks for lessons 06, 08 and 10 run the learner's function on several processes with
``course_lib.dist.launch``. Spawned workers import it by module and name, so it must
live in a ``.py`` file (the exercise writes one with ``%%writefile``), not in the notebook.

One module per exercise (``l01_metrics`` ... ``l10_tensor_parallel``, ``l11_noise_scale``,
``l12_successive_halving``, ``l13_multi_node``) over a shared :mod:`.harness`;
a new lesson's checks go in a module of their own and are listed here.
"""

from .harness import STRICT_ENV, CheckFailed, CheckResult, strict
from .l01_metrics import check_hit_rate, check_ndcg
from .l02_scaling import check_linear_scaled_lr, check_sqrt_scaled_lr
from .l03_warmup import check_warmup_factor
from .l04_lars import check_lars_step, check_lars_trust_ratio
from .l05_loss_scaling import check_loss_scaler
from .l06_allreduce import check_average_gradients, check_ring_all_reduce, ring_sizes
from .l07_lamb import check_lamb_step
from .l08_collectives import check_binomial_tree_broadcast
from .l09_perf import check_bucket_overlap
from .l10_tensor_parallel import check_copy_to_parallel
from .l11_noise_scale import check_noise_scale
from .l12_successive_halving import check_successive_halving
from .l13_multi_node import check_accumulation_to_hide

__all__ = [
    "CheckResult",
    "CheckFailed",
    "STRICT_ENV",
    "check_hit_rate",
    "check_ndcg",
    "check_linear_scaled_lr",
    "check_sqrt_scaled_lr",
    "check_warmup_factor",
    "check_lars_trust_ratio",
    "check_lars_step",
    "check_loss_scaler",
    "check_average_gradients",
    "check_ring_all_reduce",
    "check_lamb_step",
    "check_binomial_tree_broadcast",
    "check_bucket_overlap",
    "check_copy_to_parallel",
    "check_noise_scale",
    "check_successive_halving",
    "check_accumulation_to_hide",
]
