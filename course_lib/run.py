"""Run a course worker outside the notebook: under torchrun, SLURM, or as one process.

    torchrun --standalone --nproc-per-node 2 -m course_lib.run course_lib.dist:allreduce_demo
    python -m course_lib.run course_lib.dist:allreduce_demo          # one process, no group

The worker is the same ``worker(rank, world_size, *args)`` that ``launch()`` runs from a
notebook cell; only the way processes are started differs. Positional arguments after
the worker are parsed as JSON (``4`` -> int, ``'{"lr": 0.1}'`` -> dict) and passed on.
Rank 0 prints the result and, with ``--out``, saves it with ``torch.save``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import sys

from torch.distributed.elastic.multiprocessing.errors import record

from . import dist
from .fileio import atomic_torch_save


def resolve(target: str):
    """``"package.module:function"`` -> the function object."""
    module_name, sep, attr = target.partition(":")
    if not sep or not attr:
        raise SystemExit(f"worker must be given as module:function, got {target!r}")
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise SystemExit(f"cannot find worker {target!r}: {exc}") from exc
    return fn


def _parse_arg(text: str):
    """A JSON value; a plain word (``ml-1m``) stays a string. Text that starts like JSON (an object,
    a list, a quoted string, a number) must be JSON: ``'{"lr": 0.1'`` was passed on as a string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        if text.lstrip()[:1] in ('{', '[', '"') or re.fullmatch(r"\s*[-+]?(\d|\.\d)[\w.+-]*\s*", text):
            raise SystemExit(f"argument {text!r} looks like JSON but is not valid JSON ({exc.msg} at character "
                             f"{exc.pos}): quote it for the shell as one word, e.g. '{{\"lr\": 0.1}}'") from None
        return text


@record  # under torchrun: a failing rank's exception goes into torchrun's "Root Cause" summary
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_lib.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("worker", help="module:function, e.g. course_lib.dist:allreduce_demo")
    parser.add_argument("args", nargs="*", help="JSON values passed to the worker after (rank, world_size)")
    parser.add_argument("--backend", default="auto", choices=["auto", "gloo", "nccl"])
    parser.add_argument("--out", help="rank 0 saves the worker's return value here (torch.save)")
    opts = parser.parse_args(argv)
    fn = resolve(opts.worker)
    with dist.process_group_from_env(opts.backend):  # selects this rank's GPU when the backend is NCCL
        result = fn(dist.rank(), dist.world_size(), *[_parse_arg(a) for a in opts.args])
        if dist.is_main_process():
            print(f"[course_lib.run] rank 0 of {dist.world_size()} result: {result!r}", flush=True)
            if opts.out:
                atomic_torch_save(result, opts.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
