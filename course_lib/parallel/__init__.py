"""Parallelism: how work is split over ranks (lessons 06, 10).

One module per way of splitting, behind one seam: the training engine hands each global
batch to the data-parallel wrapper and never mentions ranks.

- :mod:`.data_parallel` — the per-rank slice of the global batch, accumulation with
  ``no_sync``, the DDP wrap, the one decision all ranks share (lesson 06);
- :mod:`.checkpoint` — save on rank 0, resume bit for bit;
- :mod:`.sync_batchnorm` — batch statistics over the global batch, and the comparison;
- :mod:`.scaling` — strong and weak scaling rows, table and figure.

Lesson 10, each checked equal to one process (imported by module, not re-exported):

- :mod:`.tensor` — Megatron's column- and row-parallel linear layers, attention split by
  heads, and DTensor's ``parallelize_module`` for comparison;
- :mod:`.pipeline` — GPipe and 1F1B as data, their executor over ``send``/``recv``, the
  bubble predicted and measured, and ``torch.distributed.pipelining``;
- :mod:`.sharded` — ZeRO's stages as arithmetic, stage 1 from lesson 08's ring collectives,
  FSDP2's ``fully_shard``;
- :mod:`.spatial` — a convolution over an image split across ranks, with halo exchange;
- :mod:`.hybrid` — a 2-D device mesh, data parallel x tensor parallel.
"""

from .checkpoint import CHECKPOINT_NAME, Checkpointer, CheckpointError, checkpoint_params, max_relative_difference
from .data_parallel import DataParallel, batch_config, batch_table
