"""Lesson 06 as a script: the notebook's ``ncf_worker`` under torchrun or SLURM.

    torchrun --standalone --nproc-per-node 2 -m course_lib.train_ddp --global-batch 4096 --lr 0.004
    python -m course_lib.train_ddp --global-batch 4096          # one process, no group (its GPU if any)

It trains until the dataset's HR@10 target (the lessons' ``default_target_hr``; ``--target-hr``
sets another, ``--no-target`` trains the whole ``--max-epochs`` budget).

Multi-node (see notebooks/beyond/ncf_ddp.sbatch): one ``torchrun`` per node, rendezvous on
the first node with ``--rdzv-backend c10d --rdzv-endpoint <host>:<port>``. Every rank runs
the same worker as ``launch(ncf_worker, world_size, cfg, spec)`` in the notebook; rank 0
prints progress and writes ``--out`` (JSON) and the checkpoints.

When a rank fails, ``main`` (wrapped in torchrun's ``@record``) hands its exception to
torchrun, whose summary in the job's log names the failing rank and the error under "Root
Cause"; ``--fail-at-step N`` makes ``--fail-rank`` (default 1) fail on purpose to see it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from torch.distributed.elastic.multiprocessing.errors import record

from . import dist, node_loss
from .train.workers import RunSpec, ncf_worker
from .results import save_result


def parse(argv=None) -> tuple[dict, RunSpec, str | None, str]:
    p = argparse.ArgumentParser(prog="python -m course_lib.train_ddp", description=__doc__.split("\n\n")[0])
    p.add_argument("--global-batch", type=int, default=4096, help="samples per optimizer step, all ranks")
    p.add_argument("--micro-batch", type=int, default=None, help="samples per forward/backward on one rank")
    p.add_argument("--lr", type=float, default=0.004, help="the lr as given (TrainConfig.base_lr, no scaling rule)")
    p.add_argument("--optimizer", default="adam", choices=["sgd", "adam", "lars"])
    p.add_argument("--config", default="{}", help="more TrainConfig fields as JSON, e.g. '{\"warmup_steps\": 50}'")
    p.add_argument("--dataset", default="ml-1m",
                   help="ml-1m, ml-20m or synthetic ($COURSE_MOVIELENS_DIR: offline copies)")
    p.add_argument("--synthetic-size", default=None)
    p.add_argument("--profile", default="full", choices=["full", "smoke"])
    p.add_argument("--target-hr", type=float, default=None,
                   help="stop at this HR@10 (default: the dataset's target, as in the lessons)")
    p.add_argument("--no-target", action="store_true", help="train the whole budget, never stop early")
    p.add_argument("--max-epochs", type=float, default=10)
    p.add_argument("--max-steps", type=int, default=None)
    p.add_argument("--checkpoint-dir", default=None, help="on a file system every node sees")
    p.add_argument("--checkpoint-every", type=int, default=0, help="steps between checkpoints (0: never)")
    p.add_argument("--no-resume", action="store_true", help="ignore an existing checkpoint")
    p.add_argument("--backend", default="auto", choices=["auto", "gloo", "nccl"])
    p.add_argument("--out", default=None, help="rank 0 writes the result record here (JSON)")
    p.add_argument("--fail-at-step", type=int, default=None,
                   help="debugging aid: --fail-rank raises after this many steps (what a dying rank looks like)")
    p.add_argument("--fail-rank", type=int, default=1, help="the rank --fail-at-step makes fail")
    a = p.parse_args(argv)
    cfg = {"global_batch_size": a.global_batch, "micro_batch_size": a.micro_batch, "base_lr": a.lr,
           "optimizer": a.optimizer, "target_hr": a.target_hr, "max_epochs": a.max_epochs, "max_steps": a.max_steps,
           **json.loads(a.config)}
    spec = RunSpec(dataset=a.dataset, synthetic_size=a.synthetic_size, profile=a.profile,
                   checkpoint_dir=a.checkpoint_dir, checkpoint_every=a.checkpoint_every, resume=not a.no_resume,
                   default_target=a.target_hr is None and not a.no_target,
                   fail_at_step=a.fail_at_step, fail_rank=a.fail_rank)
    if a.no_target:
        cfg["stop_at_target"] = False
    return cfg, spec, a.out, a.backend


@record  # under torchrun: a failing rank's exception goes into torchrun's "Root Cause" summary
def main(argv=None) -> int:
    cfg, spec, out, backend = parse(argv)
    # torchrun's RANK/WORLD_SIZE/MASTER_ADDR; a plain process stays alone
    with dist.process_group_from_env(backend):
        ranks = node_loss.rank_table()  # who runs where: a lost node's error names it and its ranks
        try:
            record = ncf_worker(dist.rank(), dist.world_size(), cfg, spec)
        except RuntimeError as exc:
            lost = node_loss.explain(exc, ranks, dist.rank())
            if lost:
                raise RuntimeError(lost) from exc
            raise
        print(f"rank {dist.rank()} of {dist.world_size()} stopped after {record['steps']} steps", flush=True)
        if dist.is_main_process():
            ttt = record["time_to_target_s"]
            print(f"time to target: {'not reached' if ttt is None else f'{ttt:.1f} s'}; "
                  f"final HR@10 {record['final_hr']}; {record['samples_per_s']:,.0f} samples/s", flush=True)
            if out:
                print(f"wrote {save_result(Path(out).stem, record, Path(out).parent)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
