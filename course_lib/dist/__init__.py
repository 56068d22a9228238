"""Distributed work from a notebook cell, under torchrun, or in one plain process.

- :mod:`course_lib.dist.groups`: process groups, rank helpers (``rank``, ``world_size``, ``local_rank``,
  ``device``, ``barrier``), ``choose_backend`` (gloo or NCCL), ``init_from_env`` for torchrun, and lesson
  00's first all-reduce. This is the part a learner reads.
- :mod:`course_lib.dist.launcher`: ``launch(worker, world_size, *args)`` and the supervisor behind it (the
  workers' start from a fork server, their output streamed into the cell, results through files, the
  watchdog and interrupt shield that leave no process behind).

Everything a lesson, a script or a test calls is importable from here: ``from course_lib.dist import launch``.
"""

from .groups import (
    DEFAULT_COLLECTIVE_TIMEOUT_S,
    LOOPBACK,
    MAX_RANKS_PER_CORE,
    allreduce_demo,
    barrier,
    choose_backend,
    cleanup,
    device,
    init_from_env,
    is_initialized,
    is_main_process,
    local_rank,
    process_group_from_env,
    rank,
    world_size,
)
from .launcher import LaunchTimeout, WorkerError, launch, loopback_interface
