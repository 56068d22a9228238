"""Measurements for lesson 01 (loader comparison, throughput vs batch size, a profile) and 07 (BERT throughput).

Command line (the lessons' numbers without the notebooks)::

    python -m course_lib.bench ncf [--batch-size 256] [--device cpu|cuda] [--dataset ml-1m]
    python -m course_lib.bench bert [--model base] [--seq-len 128] [--batch-size 64] [--device cuda]
    python -m course_lib.bench collectives [--world-size 2] [--size-mib 16] [--iters 10]
    python -m course_lib.bench hardware [--device cpu|cuda]
    python -m course_lib.bench model [--profile full|smoke]
    python -m course_lib.bench paleo [--net alexnet] [--device K80] [--network ethernet20] [--batch 2048]
        [--ppp-comp 0.62] [--ppp-comm 1.0] [--scaling strong|weak] [--workers 1,2,4,...,128] [--json]

prints lesson 01's data-loading ladder (a per-sample DataLoader, its textbook improvements,
the device-resident sampler: batch production and training throughput at the same batch
size) and ends with ``ratio loader: <x>`` (device-resident over the per-sample DataLoader,
loading alone). Under Nsight Systems the training
phases show up as NVTX ranges: ``nsys profile -t cuda,nvtx python -m course_lib.bench ncf``.

``bert`` times LAMB training steps of a BERT shape (BERT-base by default: 12 layers, hidden
768, vocabulary 30522, 128 tokens) on random token ids — the speed does not depend on the
text — in fp32 and in each mixed-precision mode the device supports, and ends with
``bert seqs/s <mode>: <x>`` lines and the speedup of the fastest mode over fp32.

``collectives`` (lesson 08) times the course's ring all-reduce, built from isend/irecv
(``course_lib.comm.collectives``), against the backend's own all-reduce at one message size,
in one launch, and ends with ``ratio ring/backend: <x>``: the ring's bus bandwidth over the
backend's (the same as the backend's time over the ring's).

``hardware`` (lesson 09) probes this machine (``course_lib.perf.probe``) and prints each
measurement as a fraction of the device's reference peak (``course_lib.perf.peaks``) with a
verdict, then the one-line summary. ``model`` (lesson 09) predicts the course's step for NeuMF
and mini BERT at three global batches on 1 and 2 ranks (one thread per rank), measures the
same steps, prints both per point and ends with ``median prediction error: <x>%``.
"""

from __future__ import annotations

import argparse
import sys

import torch

from .data import load_implicit
from .data.text import shape_only_mlm_data
from .hardware import default_device
from .precision import Precision
from .tables import Table
from .train.mlm import MLMTrainConfig
from .train.mlm import throughput as mlm_throughput
from .train.ncf import TrainConfig
from .compare import table as comparisons_table
from .lessons.l01_baseline import comparison_table, loader_comparison, loader_comparisons


# Quoted, not measured here: NVIDIA DeepLearningExamples' BERT README, one V100, phase 1
# (128 tokens), mixed precision, as the lesson-07 issue cites it.
V100_PHASE1_AMP_SEQS_PER_S = 172.0


def bert_throughput(model: str = "base", *, seq_len: int = 128, batch_size: int = 64, vocab_size: int = 30522,
                    device=None, steps: int = 10, warmup_steps: int = 3, precisions=None) -> dict:
    """Training sequences/s of a BERT shape per precision mode: ``{mode: throughput() record}``."""
    device = torch.device(device) if device is not None else default_device()
    if precisions is None:
        # CPU bf16 may be emulated: measured
        precisions = ["fp32", "bf16"] + (["fp16"] if device.type == "cuda" else [])
    data = shape_only_mlm_data(vocab_size, seq_len, max(batch_size, 8), device=device)
    cfg = MLMTrainConfig(model=model, global_batch_size=batch_size, micro_batch_size=batch_size, optimizer="lamb",
                         dropout=0.1)
    out = {}
    for mode in precisions:
        out[mode] = mlm_throughput(cfg.replace(precision=mode), data, device=device, steps=steps,
                               warmup_steps=warmup_steps)
        out[mode]["batch_size"] = batch_size
    return out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["paleo"]:  # lesson 09's Paleo case studies: options of their own
        from .lessons.l09_paleo import cli as paleo_cli

        return paleo_cli(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m course_lib.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["ncf", "bert", "collectives", "hardware", "model", "paleo"],
                        help="which benchmark (paleo: see python -m course_lib.bench paleo --help)")
    parser.add_argument("--batch-size", type=int, default=None, help="default: 256 (ncf), 64 (bert)")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--dataset", default="ml-1m", help="ncf: ml-1m, ml-20m or synthetic")
    parser.add_argument("--profile", default="full",
                        help="ncf, model: full or smoke ($COURSE_PROFILE overrides for ncf)")
    parser.add_argument("--model", default="base", help="bert: a preset of course_lib.models.bert (default base)")
    parser.add_argument("--seq-len", type=int, default=128, help="bert: tokens per sequence")
    parser.add_argument("--steps", type=int, default=10, help="bert: timed steps per precision mode")
    parser.add_argument("--world-size", type=int, default=2, help="collectives: ranks (default 2)")
    parser.add_argument("--size-mib", type=float, default=16, help="collectives: message size in MiB (default 16)")
    parser.add_argument("--iters", type=int, default=10, help="collectives: timed all-reduces per algorithm")
    args = parser.parse_args(argv)
    if args.what == "bert":
        return _main_bert(args)
    if args.what == "collectives":
        return _main_collectives(args)
    if args.what == "hardware":
        return _main_hardware(args)
    if args.what == "model":
        return _main_model(args)

    from .hardware import detect
    from .tiers import plan

    data = load_implicit(args.dataset, profile=args.profile)
    print(f"data: {data.source}")
    workers = plan(detect(), args.profile).loader_workers
    comp = loader_comparison(data, TrainConfig(global_batch_size=args.batch_size or 256), device=args.device,
                             workers=workers, **({"load_samples": 50_000, "train_steps": 40} if args.profile == "smoke"
                                                 else {}))
    print(comparison_table(comp))
    print(comparisons_table(loader_comparisons(comp), title="rung over rung, paired pass by pass"))
    print(f"ratio training: {comp['ratio_training']:.2f}")
    print(f"ratio loader: {comp['ratio_loading']:.1f}")
    return 0


def _main_bert(args) -> int:
    batch = args.batch_size or 64
    print(f"BERT {args.model}, {args.seq_len} tokens, batch {batch}, LAMB training steps on random ids", flush=True)
    res = bert_throughput(args.model, seq_len=args.seq_len, batch_size=batch, device=args.device, steps=args.steps,
                          warmup_steps=max(1, min(3, args.steps)))
    fp32 = Precision("fp32", args.device or default_device()).fp32_matmul
    print(f"fp32 here runs its matmuls in {fp32}" + ("" if fp32 == "tf32" else
          " (TensorFloat-32 off: torch's default; torch.backends.cuda.matmul.allow_tf32 = True for tf32)"))
    t = Table(["precision", "sequences/s", "tokens/s", "step (ms)", "speedup vs fp32"])
    for mode, r in res.items():
        t.add(precision=mode, **{"sequences/s": round(r["seqs_per_s"], 1), "tokens/s": round(r["tokens_per_s"]),
                                 "step (ms)": round(r["step_s"] * 1e3, 1),
                                 "speedup vs fp32": round(r["seqs_per_s"] / res["fp32"]["seqs_per_s"], 2)})
    print(t)
    for mode, r in res.items():
        print(f"bert seqs/s {mode}: {r['seqs_per_s']:.1f}")
    best = max(res, key=lambda m: res[m]["seqs_per_s"])
    print(f"ratio {best} vs fp32: {res[best]['seqs_per_s'] / res['fp32']['seqs_per_s']:.2f}")
    if args.model == "base" and args.seq_len == 128:
        print(f"ratio {best} vs V100 phase-1 AMP (~{V100_PHASE1_AMP_SEQS_PER_S:.0f} seq/s, NVIDIA, quoted): "
              f"{res[best]['seqs_per_s'] / V100_PHASE1_AMP_SEQS_PER_S:.2f}")
    return 0


def _main_collectives(args) -> int:
    from .comm.bench import ring_vs_backend

    size = int(args.size_mib * 2**20)
    res = ring_vs_backend(args.world_size, size, args.iters)
    print(res.table(args.world_size))
    busbw = {r["algorithm"]: r["busbw_GBps"] for r in res.rows}
    for name, bw in busbw.items():
        print(f"busbw {name}: {bw:.3f} GB/s")
    print(f"ratio ring/backend: {busbw['ring'] / busbw['backend']:.2f}")
    return 0


def _main_hardware(args) -> int:
    from .perf.probe import probe_hardware

    probe = probe_hardware(args.device)
    print(probe.table())
    print(f"summary: {probe.summary()}")
    return 0


def _main_model(args) -> int:
    from . import compare
    from .lessons import l09_performance_model as study
    from .dist import launch

    spec = study.lesson_spec(args.profile or "full", bert_preset="mini")
    print(f"NeuMF batches {spec['ncf_batches']}, BERT {spec['bert']} batches {spec['bert_batches']}; "
          "1 rank here, 2 ranks under launch (gloo), one thread per rank", flush=True)
    one = study.one_rank_measurements(spec)
    two = launch(study.two_rank_worker, 2, spec, backend="gloo", threads_per_worker=1)[0]
    rows = study.predictions(one, two, spec)
    print(study.comparison_table(rows))
    print(study.parts_table(rows))
    print(compare.table(study.model_comparisons(rows), title="the model against the measured steps"))
    print(f"median prediction error: {100 * study.median_error(rows):.0f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
