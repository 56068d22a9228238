"""Parallelism: how work is split over ranks (lessons 06, 10).

One module per way of splitting, behind one seam: the training engine hands each global
batch to the data-parallel wrapper and never mentions ranks.

- :mod:`.data_parallel` — the per-rank slice of the global batch, accumulation with
  ``no_sync``, the DDP wrap, the one decision all ranks share (lesson 06);
- :mod:`.checkpoint` — save on rank 0, resume bit for bit;
- :mod:`.sync_batchnorm` — batch statistics over the global batch, and the comparison;
- :mod:`.scaling` — strong and weak scaling rows, table and figure.

Tensor, pipeline and sharded data parallelism (lesson 10) go in ``tensor.py``,
``pipeline.py`` and ``sharded.py`` here, each wrapping the model the same way.
"""

from .checkpoint import CHECKPOINT_NAME, Checkpointer, CheckpointError, checkpoint_params, max_relative_difference
from .data_parallel import DataParallel, batch_config, batch_table
