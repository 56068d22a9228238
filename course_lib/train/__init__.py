"""Training: the one engine and what each model adds to it (lessons 01-07).

- :mod:`.engine` — the step (micro batches, precision, clipping, optimizer) and the clock;
- :mod:`.ncf` — NeuMF to a target HR@10: ``TrainConfig``, ``train_to_target``, evaluation;
- :mod:`.mlm` — BERT masked-LM to a target loss: ``MLMTrainConfig``, ``train_mlm``;
- :mod:`.workers` — the same runs as ``worker(rank, world_size, ...)`` for every launcher.

NeuMF's names and the hooks both loops take are re-exported:
``from course_lib.train import RunHooks, TrainConfig, train_to_target``.
"""

from .engine import RunHooks
from .ncf import (
    TARGETS,
    TrainConfig,
    TrainResult,
    build_model,
    default_target_hr,
    epochs_to_steps,
    evaluate,
    evaluate_popularity,
    evaluate_train,
    last_train_items,
    make_batches,
    make_optimizer,
    steps_per_epoch,
    train_to_target,
)
