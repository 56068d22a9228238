"""What lesson 06 measures, read from the learner's own numbers.

Each reading takes the rows a benchmark returned and says what they show, in words that stay
true on any tier (CPU processes over gloo, one GPU whose ranks are CPU processes, several GPUs
over NCCL) and at any world size, including one. A difference is called a difference only when
it beats the noise measured next to it: the spread of the all-reduce sweep's blocks, the range
of the bucket benchmark's repeats (or, the variants running interleaved, every round: :func:`measurably_different`).

- :func:`ring_reading` — what the ring all-reduce's schedule sends, counted from lesson 08's schedules;
- :func:`allreduce_reading` — the sweep: where latency ends and bandwidth begins, and whether the
  small messages really lie on a flat line;
- :func:`overlap_reading` — the bucket benchmark: the share of a step that is communication,
  what overlapping it with backward saved, what the bucket size changed;
- :func:`compression_reading` — fp16/bf16 gradient compression: bytes, time, and whether the
  training stayed the same.

- :func:`scaling_rows` / :func:`scaling_reading` / :func:`optimization_reading` — strong and weak scaling:
  throughput, and epochs and time to the target, from the data-parallel runs.
"""

from __future__ import annotations

import math

from ..comm.collectives import ring_allreduce_schedule
from ..comm.cost import human_bytes, allreduce_busbw_factor
import matplotlib.pyplot as plt
from ..metrics import line_fit, paired_speedup
from ..tables import Table

# unit roundoff of each 16-bit format (half the distance from 1 to the next number): 2^-11, 2^-8
UNIT_ROUNDOFF = {"fp16": 2.0 ** -11, "bf16": 2.0 ** -8}
TORCH_HOOK_NAMES = {"fp16": "fp16_compress_hook", "bf16": "bf16_compress_hook"}


# --------------------------------------------------------------------------- noise


# the step's cost over the floor beyond the all-reduces' pending time, as a share of that cost, from which the
# overlap reading says that part is not the all-reduces (read r6b 06-3)
EXPOSED_BEYOND_PENDING = 0.2


def repeat_range(row: dict) -> tuple[float, float]:
    """Fastest and slowest repeat of a bucket-benchmark row (ms)."""
    reps = row.get("step_ms_repeats") or [row["step_ms"]]
    return min(reps), max(reps)


def interleaved_rounds(a: dict, b: dict) -> list[tuple[float, float]] | None:
    """The two rows' repeats paired round by round (ms), or None where they cannot be: the bucket benchmark runs
    its variants interleaved (A, B, C, A, B, C, ...: :func:`course_lib.comm.bench.ddp_bucket_benchmark`), so
    repeat i of every row ran in the same round, under the same load; rows with unequal counts are not paired."""
    ra, rb = a.get("step_ms_repeats") or [], b.get("step_ms_repeats") or []
    return list(zip(ra, rb)) if len(ra) == len(rb) >= 2 else None


PAIRED_MIN_EFFECT = 0.05  # a round-by-round difference must exceed this in every round (metrics.paired_speedup's)


def measurably_different(a: dict, b: dict, min_effect: float = PAIRED_MIN_EFFECT) -> bool | None:
    """True when the repeats' ranges of two rows do not overlap, or when every interleaved round
    (:func:`interleaved_rounds`) ran one of them slower by more than ``min_effect`` (lesson 01's paired rule,
    :func:`course_lib.metrics.paired_speedup`): a round the machine's load slowed slows every variant in it, and
    widens each row's range without moving their order. None with fewer than 2 repeats each (then there is no
    noise to compare with). (Read r4b 06-1, fourth full run: the floor at 14.9, 6.72, 6.68 ms and the 25 MiB buckets
    at 26.4, 14.1, 15.2 ms, slower in every round by 1.8-2.3x, read "as long as with no communication at all, within
    the noise" because the first round was slow for every variant.)"""
    if min(len(a.get("step_ms_repeats") or []), len(b.get("step_ms_repeats") or [])) < 2:
        return None
    (lo_a, hi_a), (lo_b, hi_b) = repeat_range(a), repeat_range(b)
    if hi_a < lo_b or hi_b < lo_a:
        return True
    rounds = interleaved_rounds(a, b)
    return bool(rounds) and paired_speedup([y / x for x, y in rounds], min_effect)[1]


def _rounds_text(a: dict, b: dict, what_a: str, what_b: str) -> str:
    """Where the ranges overlap but every round agrees: the rounds, so the verdict can be checked in the table."""
    (lo_a, hi_a), (lo_b, hi_b) = repeat_range(a), repeat_range(b)
    rounds = interleaved_rounds(a, b)
    if rounds is None or hi_a < lo_b or hi_b < lo_a:
        return ""
    pairs = ", ".join(f"{x:.3g} vs {y:.3g}" for x, y in rounds)
    return (f"; their repeats' ranges overlap, but every interleaved round ran {what_a} and {what_b} in the same "
            f"order ({pairs} ms)")


def _vs(a: dict, b: dict, what_a: str, what_b: str) -> str:
    """'A took x ms, y ms less than B (z %)' or 'no measurable difference ...', from two rows."""
    d = b["step_ms"] - a["step_ms"]
    verdict = measurably_different(a, b)
    ra, rb = repeat_range(a), repeat_range(b)
    ranges = f"{what_a} {ra[0]:.3g}-{ra[1]:.3g} ms, {what_b} {rb[0]:.3g}-{rb[1]:.3g} ms over the repeats"
    if verdict is False:
        rounds = (f", and the interleaved rounds do not all put one ahead by more than {PAIRED_MIN_EFFECT:.0%}"
                  if interleaved_rounds(a, b) else "")
        return f"no measurable difference between {what_a} and {what_b} (their repeats overlap{rounds}: {ranges})"
    word = "less" if d > 0 else "more"
    tail = (_rounds_text(a, b, what_a, what_b) if verdict else
            " (one repeat only: no noise estimate, so this may be noise)")
    return (f"{what_a} took {a['step_ms']:.3g} ms per step, {abs(d):.3g} ms {word} than {what_b} "
            f"({abs(d) / b['step_ms']:.0%}){tail}")


# --------------------------------------------------------------------------- the ring


def ring_reading(p: int, n_elements: int | None = None) -> str:
    """What each rank sends in a ring all-reduce on ``p`` ranks, counted on the schedule itself."""
    if p < 2:
        return "one rank: an all-reduce has nothing to send (the ring has no rounds)."
    n = n_elements or 1000 * p
    s = ring_allreduce_schedule(p, n)
    sent = max(s.elements_sent_by(r) for r in range(p))
    return (f"ring all-reduce on {p} ranks: {len(s.rounds)} rounds (reduce-scatter, then all-gather), {s.messages} "
            f"messages; each rank sends {sent:,} of the tensor's {n:,} elements, {sent / n:.3g}x the tensor "
            f"= 2(p-1)/p = {allreduce_busbw_factor(p):.3g}: the factor nccl-tests multiplies algbw by to get busbw. "
            "It stays below 2 however many ranks join, which is why the ring is bandwidth-optimal; the "
            f"{len(s.rounds)} rounds are its latency cost, and they grow with p.")


# --------------------------------------------------------------------------- the all-reduce sweep


def allreduce_reading(bench) -> str:
    """Where the sweep's latency regime ends, whether its small messages lie on a flat line
    (compared with the spread of the blocks), and how close the largest came to the fit's bandwidth."""
    rows = sorted(bench.rows, key=lambda r: r["size_bytes"])
    if bench.world_size < 2:
        return ("one rank: an all-reduce has nobody to exchange with, so these times are the call's own "
                "overhead, not a link; run with 2 or more ranks to measure one.")
    alpha, beta = bench.fit()
    n_half = alpha / beta if beta > 0 else math.inf  # the size where n x beta = alpha
    small = [r for r in rows if r["size_bytes"] <= n_half]
    large = [r for r in rows if r["size_bytes"] > n_half]
    parts = []
    if small:
        times = [r["time_s"] * 1e6 for r in small]
        lo, hi = min(times), max(times)
        level = sorted(times)[len(times) // 2]  # the flat line's height: the median size's time
        spread = {r["size_bytes"]: (r["time_max_s"] - r["time_min_s"]) * 1e6 if "time_max_s" in r else 0.0
                  for r in small}
        # a size lies off the line when it is farther from the level than its own blocks spread
        off = [r for r, t in zip(small, times) if abs(t - level) > spread[r["size_bytes"]]]
        if len(small) == 1:
            shape = "a single size, so no line to judge"
        elif not off:
            shape = (f"a flat line within the noise: every size lies within its own blocks' spread of the median, "
                     f"{level:.3g} us")
        elif times[-1] >= 1.5 * times[0] and times == sorted(times):
            shape = (f"not flat: the time already grows with the size ({times[0]:.3g} to {times[-1]:.3g} us), "
                     "by more than the blocks' spread")
        else:
            names = ", ".join(f"{human_bytes(r['size_bytes'])} ({t:.3g} us)" for r, t in zip(small, times) if r in off)
            shape = (
                f"not a flat line: {names} {'lies' if len(off) == 1 else 'lie'} off the median {level:.3g} us by "
                f"more than {'its' if len(off) == 1 else 'their'} blocks' spread, "
                f"without a trend in size ({hi / lo:.2g}-fold from fastest to slowest): per-call costs that change "
                "from size to size (buffer allocation, the library switching algorithms) or a busy machine, "
                "not the bytes"
            )
        where = (f"up to the largest size measured ({human_bytes(small[-1]['size_bytes'])})" if not large else
                 f"up to about {human_bytes(n_half)}, where the fit's bandwidth term n x beta reaches its latency "
                 f"alpha = {alpha * 1e6:.3g} us")
        parts.append(f"Latency regime {where}: {len(small)} size(s) from {human_bytes(small[0]['size_bytes'])}, "
                     f"measured {lo:.3g}-{hi:.3g} us, {shape}.")
    if alpha <= 0:
        # the fit's alpha is 0 (cost.fit_alpha_beta: a negative intercept is set to 0), so n_half is 0 and no size
        # is in a latency regime; lesson 08's ping-pong did the same on a busy CI machine (commit 19edebe)
        parts.append("The fit resolved no latency at all (its alpha is zero: at the smallest sizes the noise is "
                     "larger than the call's latency, or the times grow faster than the size), so there is no "
                     "latency regime to read.")
    if large:
        best = max(large, key=lambda r: r["busbw_GBps"])
        asymptote = allreduce_busbw_factor(bench.world_size) / beta / 1e9
        # read r10c 06-S1 (tenth full run): "the time grows with the size" over 1 MiB at 12.46 ms and 4 MiB at 10.55
        dips = [(a, b) for a, b in zip(large, large[1:]) if b["time_s"] < a["time_s"]]
        grows = "the time grows with the size"
        if dips:
            overlap = all(b.get("time_max_s", b["time_s"]) >= a.get("time_min_s", a["time_s"]) for a, b in dips)
            grows = (f"the time grows from {large[0]['time_s'] * 1e6:.3g} to {large[-1]['time_s'] * 1e6:.3g} us over "
                     "these sizes, though " + ", ".join(
                         f"{human_bytes(b['size_bytes'])} took less than {human_bytes(a['size_bytes'])} "
                         f"({b['time_s'] * 1e6:.4g} vs {a['time_s'] * 1e6:.4g} us)" for a, b in dips)
                     + (" within their blocks' spread" if overlap else ", by more than their blocks' spread"))
        parts.append(
            f"Bandwidth regime {'above it' if small else 'at every size measured'}: {grows}, "
            f"and the largest busbw measured is "
            f"{best['busbw_GBps']:.3g} GB/s at {human_bytes(best['size_bytes'])}, {best['busbw_GBps'] / asymptote:.0%} "
            f"of the fit's asymptote ({asymptote:.3g} GB/s = 2(p-1)/p / beta)."
        )
    else:
        parts.append("No size measured here is large enough for the bandwidth term to dominate"
                     + (" (the fit found no bandwidth term at all)" if beta <= 0 else "")
                     + ": the full profile's sizes (up to 64 MiB on CPUs, 256 MiB on GPUs) reach it.")
    return " ".join(parts)


# --------------------------------------------------------------------------- buckets and overlap


def _largest_tensor_mb(spec) -> float | None:
    try:
        return max(p.numel() for p in spec.build().parameters()) * 4 / 2**20
    except Exception:  # a spec without build(): say nothing about tensor sizes
        return None


def overlap_reading(result) -> str:
    """The communication share of a step and what overlap saved, from the bucket benchmark's rows,
    each difference compared with the range of its repeats."""
    rows = result.bucket_rows
    buckets = [r for r in rows if r["overlap"] is True and r.get("step_ms") is not None]
    floor = next((r for r in rows if r["overlap"] is None), None)
    serial = next((r for r in rows if r["overlap"] is False), None)
    if not buckets:
        return "no DDP bucket rows to read."
    best = min(buckets, key=lambda r: r["step_ms"])
    worst = max(buckets, key=lambda r: r["step_ms"])
    reps = min(len(r.get("step_ms_repeats") or []) for r in rows if r.get("step_ms") is not None)
    parts = []
    if result.world_size < 2:
        parts.append("One rank: DDP has nobody to all-reduce with, so every variant is compute plus the call's "
                     "overhead.")
    n = best.get("allreduces_per_step") or 0
    cap = f"{best['bucket_cap_mb']:g} MiB buckets ({n:.3g} all-reduce{'' if n == 1 else 's'} per step)"
    # read r3a 06-1 (full run 2026-12-01, /tmp/mc3): "with the fastest setting, 25 MiB buckets ... 21.9 ms" over a
    # table whose one all-reduce after backward ran 20.26 ms: the best is the fastest of the bucket settings
    faster_serial = serial is not None and serial.get("step_ms") is not None and serial["step_ms"] < best["step_ms"]
    which = "bucket setting" if faster_serial else "setting"
    if floor is not None:
        exposed = best["step_ms"] - floor["step_ms"]
        same = measurably_different(best, floor)
        if same is False:
            parts.append(f"Communication share: not measurable here. With {cap} a step took as long as with no "
                         f"communication at all, within the noise ({_vs(best, floor, 'buckets', 'the floor')}): "
                         "either the all-reduces hid behind backward, or the machine's noise is larger than what "
                         "they cost (rerun on a quieter machine to tell).")
        else:
            head = (f"Communication share: with the fastest {which}, {cap}, a step took {best['step_ms']:.3g} ms "
                    f"against {floor['step_ms']:.3g} ms with no communication, so "
                    f"{max(exposed, 0) / best['step_ms']:.0%} of the step is communication")
            pending = best.get("comm_ms") or 0.0
            rest = max(exposed, 0.0) - pending
            rounds = _rounds_text(best, floor, "the buckets", "the floor") if same else ""
            if pending and rest > EXPOSED_BEYOND_PENDING * max(exposed, 0.0):
                # read r6b 06-3 (sixth full run): "53% of the step is communication that did not hide behind backward
                # (all-reduces were pending 7.45 ms per step)": 23.2 - 10.9 = 12.3 ms, of which the all-reduces were
                # pending 7.45 (32% of the step); the other 4.84 ms is not the all-reduces, and the reading says so
                parts.append(
                    head + f"'s cost that did not hide behind backward ({max(exposed, 0):.3g} ms): the all-reduces "
                    f"themselves were pending {pending:.3g} ms per step ({pending / best['step_ms']:.0%} of the step), "
                    f"and the other {rest:.3g} ms is time spent outside them (DDP's hooks and bucket copies, or "
                    + ("gloo's threads taking the cores from the computation" if result.backend == "gloo" else
                       f"{result.backend}'s kernels competing with the computation")
                    + ": no cell here measured which)"
                    + (f" ({rounds[2:]})." if rounds else "." if same else "; one repeat only, so no noise estimate."))
            else:
                parts.append(
                    head + " that did not hide behind backward (all-reduces were pending "
                    f"{pending:.3g} ms per step"
                    + (f"{rounds})." if same else "); one repeat only, so no noise estimate.")
                )
    if serial is not None:
        # read r10c 06-H1 (tenth full run): "What overlap saved: nothing measurable — no measurable difference between
        # the best bucket setting and one all-reduce after backward", the best being 25 MiB buckets, one bucket per
        # step, ready only when backward ended (the timeline: 0 ms under backward): it cannot overlap. The settings
        # with more than one bucket are the ones that can, so they are the ones set against the serial all-reduce
        ov, what, head = best, "the best bucket setting", "What overlap saved: "
        several = [r for r in buckets if (r.get("allreduces_per_step") or 0) > 1]
        if (best.get("allreduces_per_step") or 0) <= 1:
            if several:
                ov = min(several, key=lambda r: r["step_ms"])
                what = f"the {ov['bucket_cap_mb']:g} MiB buckets"
                head += (f"the fastest bucket setting made one bucket, ready only when backward ended, so it had "
                         f"nothing to overlap; of the settings with more than one bucket, the fastest is {what} "
                         f"({ov['allreduces_per_step']:.3g} all-reduces per step): ")
            else:
                head += ("not measured: every bucket setting made one bucket per step, ready only when backward "
                         "ended, so none had anything to overlap; ")
        verdict = measurably_different(ov, serial)
        if verdict is False:
            parts.append(f"{head}nothing measurable — "
                         f"{_vs(ov, serial, what, 'one all-reduce after backward')}.")
        elif ov["step_ms"] < serial["step_ms"]:
            parts.append(f"{head}{_vs(ov, serial, what, 'one all-reduce after backward')}.")
        else:
            parts.append(f"{head}nothing — "
                         f"{_vs(serial, ov, 'one all-reduce after backward', what)}: "
                         "overlapping bought nothing here (backward and the all-reduce compete for the same "
                         "cores, or each extra message costs more than the overlap hides).")
    if len(buckets) > 1 and worst is not best:
        names = (f"{best['bucket_cap_mb']:g} MiB", f"{worst['bucket_cap_mb']:g} MiB")
        parts.append(f"Bucket size: {_vs(best, worst, *names)}.")
        counts = {}
        for r in buckets:
            counts.setdefault(r.get("allreduces_per_step"), []).append(r["bucket_cap_mb"])
        same = [caps for n, caps in counts.items() if n is not None and len(caps) > 1]
        if same:
            big = _largest_tensor_mb(result.model_spec)
            parts.append(f"Caps {', '.join(f'{c:g}' for c in same[0])} MiB made the same number of buckets: a bucket "
                         "takes whole tensors until it reaches its cap"
                         + (f", and this model's largest gradient is {big:.3g} MiB." if big else "."))
    if reps < 2:
        parts.append("(With one repeat there is no noise estimate: run with repeats >= 2 before drawing conclusions.)")
    return " ".join(parts)


def _union(intervals) -> list[tuple[float, float]]:
    out = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def timeline_rows(result) -> list[dict]:
    """Per variant, from its recorded step (rank 0's step of median length, the one
    :func:`course_lib.comm.plots.plot_bucket_timeline` draws): how many all-reduces, how long one was
    pending (their union), and how much of that lay while backward was still computing (overlap)
    rather than after it (waiting). The rows of :func:`timeline_table` and :func:`timeline_reading`."""
    out = []
    for r in result.rows:
        tl = r.get("timeline")
        if not tl or r["overlap"] is None or not tl["allreduces_ms"]:
            continue
        spans = _union((a, b) for a, b, _ in tl["allreduces_ms"])
        pending = sum(b - a for a, b in spans)
        compute_end = max(a for a, _, _ in tl["allreduces_ms"]) if r["overlap"] else tl["backward_end_ms"]
        under = sum(max(0.0, min(b, compute_end) - max(a, tl["backward_start_ms"])) for a, b in spans)
        name = (
            "one all-reduce after backward"
            if r["overlap"] is False
            else f"{r['compression']}-compressed {r['bucket_cap_mb']:g} MiB"
            if r.get("compression") not in (None, "none")
            else f"{r['bucket_cap_mb']:g} MiB buckets"
        )
        three = lambda x: float(f"{x:.3g}")  # noqa: E731  (the precision the reading quotes, cell for cell)
        out.append({"variant": name, "all-reduces": len(tl["allreduces_ms"]), "step (ms)": three(tl["step_ms"]),
                    "pending (ms)": three(pending), "under backward (ms)": three(under),
                    "share under backward": f"{under / pending:.0%}" if pending > 0 else "—"})
    return out


def timeline_table(result) -> Table:
    """The steps :func:`timeline_reading` reads, one row per variant (#37 item 1: the reading quotes these
    cells; the bucket table above holds other numbers, the median over repeats of the slowest rank)."""
    t = Table(["variant", "all-reduces", "step (ms)", "pending (ms)", "under backward (ms)", "share under backward"],
              title="The steps drawn: rank 0's median step per variant (one step, not the bucket table's median "
                    "over repeats)")
    for row in timeline_rows(result):
        t.add(**row)
    return t


def timeline_reading(result) -> str:
    """From each variant's recorded step (:func:`timeline_rows`): how long an all-reduce was pending, and
    how much of that lay while backward was still computing (overlap) rather than after it (waiting);
    then which variant hid the most, or that none hid any."""
    rows = timeline_rows(result)
    if not rows:
        return "no recorded all-reduces to read."
    parts = []
    for r in rows:
        n, share = r["all-reduces"], r["share under backward"]
        parts.append(f"{r['variant']}: {n} all-reduce{'s' if n != 1 else ''} pending {r['pending (ms)']:g} ms "
                     f"of a {r['step (ms)']:g} ms step, {r['under backward (ms)']:g} ms of it"
                     + (f" ({share})" if share != "—" else "") + " while backward was still computing")
    most = max(rows, key=lambda r: r["under backward (ms)"] / r["pending (ms)"] if r["pending (ms)"] else 0.0)
    if most["under backward (ms)"] > 0:
        end = (f". What lies under backward's compute overlapped it, the rest the step waited for: {most['variant']} "
               f"hid the largest share ({most['share under backward']}).")
    else:
        end = (". None of the all-reduces lay under backward's compute: every step waited for all of its "
               "communication.")
    return "In the steps drawn (rank 0's median step per variant): " + "; ".join(parts) + end


# --------------------------------------------------------------------------- compression


def compression_reading(result, tolerance: float = 0.01) -> str:
    """What fp16/bf16 gradient compression did: bytes (counted), time (against the repeats' noise),
    and whether training stayed the same: the loss after the run's steps, within ``tolerance`` of the
    loss decrease the uncompressed run made, and the parameters' distance in the format's rounding units."""
    rows = result.compression_rows
    if not rows:
        return "gradient compression was not measured in this run."
    ref, comps = rows[0], rows[1:]
    parts = []
    for r in comps:
        c = r["compression"]
        if r.get("step_ms") is None:
            reduces = r.get("backend_reduces_dtype")
            backend_says = ("" if reduces is None else
                            f" It checks how torch was built, not the process group: {r.get('backend', 'the backend')} "
                            f"itself {'summed' if reduces else 'could not sum'} {c} tensors correctly in this run.")
            parts.append(f"{c}: not run here. DDP refuses torch's {TORCH_HOOK_NAMES.get(c, c)} in this build of torch "
                         f"(\"{r.get('refused')}\").{backend_says}")
            continue
        ratio = r["bytes_per_step"] / ref["bytes_per_step"] if ref.get("bytes_per_step") else math.nan
        time_part = _vs(r, ref, f"{c}", "uncompressed")
        decrease = ref["first_loss"] - ref["final_loss"]
        loss_diff = abs(r["final_loss"] - ref["final_loss"])
        u = UNIT_ROUNDOFF.get(c)
        units = f" ({r['update_rel_diff'] / u:.2g} units of {c}'s rounding, 2^{int(math.log2(u))})" if u else ""
        if decrease > 0:
            same = loss_diff <= tolerance * decrease
            train = (f"training {'unchanged' if same else 'changed'} within {tolerance:.0%}: "
                     f"after {r['steps']} timed steps "
                     f"(plus warm-up) the loss is {r['final_loss']:.5g} against {ref['final_loss']:.5g}, a difference "
                     f"{loss_diff / decrease:.2%} of the {decrease:.3g} the uncompressed run gained")
        else:
            train = "the uncompressed run did not lower the loss, so the loss cannot say whether training changed"
        u_flow = r.get("underflow") or {}
        flushed = ((u_flow["nonzero"] - u_flow["nonzero_sent"]) / u_flow["nonzero"]) if u_flow.get("nonzero") else None
        sub = (u_flow["subnormal_sent"] / u_flow["nonzero"]) if u_flow.get("nonzero") else None
        flow = ("" if flushed is None else
                f"; of the nonzero gradients, {flushed:.2%} became zero in {c} and {sub:.2%} were subnormal there "
                "(fewer bits kept)")
        parts.append(
            f"{c}: {human_bytes(r['bytes_per_step'])} all-reduced per step instead of "
            f"{human_bytes(ref['bytes_per_step'])} ({ratio:.2g}x, counted on the tensors handed to all_reduce); "
            f"{time_part}; all-reduces pending {r['comm_ms']:.3g} ms per step against {ref['comm_ms']:.3g}; "
            f"{train}; the parameters ended {r['update_rel_diff']:.2g} away from the uncompressed run's "
            f"(relative to how far training moved them){units}, most in {r['worst_tensor']} "
            f"({r['worst_tensor_rel_diff']:.2g}){flow}."
        )
    return " ".join(parts)


def _resolution(config: dict) -> float | None:
    """The evaluation spacing near the target of a run's config (epochs), None when not recorded."""
    if config.get("dense_eval_margin") and config.get("dense_eval_every_epochs"):
        return config["dense_eval_every_epochs"]
    return config.get("eval_every_epochs")


def sbatch_summary(path) -> str:
    """The lines of a SLURM batch script a learner adapts (its ``#SBATCH`` options and the launch line),
    with the file's path and length, instead of the whole file (item 8 of #37: no file printed whole)."""
    from pathlib import Path

    text = Path(path).read_text()
    lines = text.splitlines()
    # the launch is a command, not a comment that names one (the fourth read: a comment cut off mid-sentence was
    # kept for naming torchrun), and it is kept whole, with its continuation lines
    keep, going_on = [], False
    for ln in lines:
        launch = going_on or (not ln.lstrip().startswith("#") and ln.split()[:1] in (["srun"], ["torchrun"]))
        if ln.startswith("#SBATCH") or launch:
            keep.append(ln)
        going_on = launch and ln.rstrip().endswith("\\")
    return "\n".join([f"{path}: {len(lines)} lines; the options and the launch:"] + keep[:30])


def scaling_rows(strong: dict, weak: dict) -> list[dict]:
    """Strong (fixed global batch) and weak (fixed per-rank batch) scaling, one row per run.

    ``strong``/``weak``: ``{world_size: result record}``. Efficiency is throughput over
    ``world_size x`` the one-rank throughput of the same mode (1.0 = perfect scaling); for
    strong scaling also time-to-target efficiency ``T(1) / (W T(W))``.
    """
    rows = []
    for mode, runs in (("strong", strong), ("weak", weak)):
        one = runs.get(1)
        for w in sorted(runs):
            r = runs[w]
            speedup = r["samples_per_s"] / one["samples_per_s"] if one else None
            ttt, ttt1 = r["time_to_target_s"], one["time_to_target_s"] if one else None
            comm = r.get("comm_time_s") or 0.0
            rows.append({
                "mode": mode, "world_size": w, "global_batch": r["config"]["global_batch_size"],
                "per_rank_batch": r["config"]["global_batch_size"] // w, "lr": r["config"]["peak_lr"],
                "samples_per_s": r["samples_per_s"], "speedup": speedup,
                "efficiency": speedup / w if speedup is not None else None,
                "time_to_target_s": ttt, "epochs_to_target": r["epochs_to_target"],
                "steps_to_target": r.get("steps_to_target"),
                "ttt_efficiency": ttt1 / (w * ttt) if (mode == "strong" and ttt and ttt1) else None,
                "comm_s": comm, "comm_share": comm / r["train_time_s"] if r["train_time_s"] else None,
                "comm_method": r.get("comm_method") or "",
                "resolution_epochs": _resolution(r["config"]),
                "final_hr": r["final_hr"]})
    return rows


# Quoted, not measured: NVIDIA DeepLearningExamples' NCF reference trains ml-20m with a global
# batch of 2**20 over 8 GPUs, 131,072 samples per GPU per step, with (fused) Adam — its README,
# PyTorch/Recommendation/NCF/README.md, "Default configuration": "FusedAdam optimizer"; no LARS.
NVIDIA_NCF_SAMPLES_PER_GPU = 131_072
NVIDIA_NCF_QUOTE = "NVIDIA's NCF reference, quoted: 131,072 samples per GPU on 8 GPUs for ml-20m, with Adam"


def _against_reference(per_rank: float) -> str:
    """The fit's per-rank batch against NVIDIA's, a clause chosen by the two numbers."""
    ref = NVIDIA_NCF_SAMPLES_PER_GPU
    if f"{max(per_rank / ref, ref / per_rank):.2g}" == "1":
        where = "about the same per-rank batch as"
    elif per_rank < ref:
        where = f"{ref / per_rank:.2g}x below"
    else:
        where = f"{per_rank / ref:.2g}x above"
    return f"{where} {NVIDIA_NCF_QUOTE} (another model size, GPUs and link: a scale to compare, not a check)"


def _allreduce_per_step(row: dict) -> float:
    """The seconds per step a row's run had a gradient all-reduce pending (its timed ``comm_share`` of the step): what
    only a run on more than one rank pays."""
    return (row.get("comm_share") or 0.0) * row["global_batch"] / row["samples_per_s"]


def step_time_fit(rows: list[dict]) -> tuple[float, float] | None:
    """Least-squares ``step_s - all-reduce_s = fixed_s + per_sample_s x per-rank batch`` over the strong-scaling rows.

    Strong scaling keeps the global batch, so each size gives another per-rank batch: the
    intercept is what a step costs whatever the batch (the optimizer's step over every
    parameter and the launches are candidates; lesson 06 does not time them apart, so its readings do not name them:
    read f12d 06-H2), the slope the compute per sample. The all-reduce each run timed
    (:func:`_allreduce_per_step`) is taken out first: one rank does not pay it, so left in, a line through one rank
    and two puts it in the slope as well as the intercept (read r10c 06-C1, tenth full run: "each step costs 26.55 ms
    whatever the batch ... plus 0.96 us per sample" over one rank at 42.2 ms per step and two at 34.4 ms, 11.1 ms of
    it the timed all-reduce: without it 4.29 ms + 2.32 us per sample). None with fewer than two sizes.
    """
    strong = [r for r in rows if r["mode"] == "strong" and r["samples_per_s"]]
    return line_fit([r["per_rank_batch"] for r in strong],
                    [r["global_batch"] / r["samples_per_s"] - _allreduce_per_step(r) for r in strong])


def _no_shrink_reading(strong: list[dict]) -> str:
    """Why a strong-scaling step did not shrink with the per-rank batch, from the rows' timed all-reduce (lesson 06).

    Read r6b 06-1 (sixth full run): "The step time did not shrink ..., so fixed costs (the optimizer's step over every
    parameter, the all-reduce, launches) or noise dominate" over one rank at 20.9 ms per step and two at 36.1 ms, of
    which the timed all-reduce was 11.3 ms: without it the 2-rank step (24.8 ms) was still slower than one rank's at
    twice the samples, which no cost that does not depend on the batch can make. The fifth run's two ranks (22.7 ms,
    7.9 ms of it all-reduce, 14.8 ms without) against one rank's 19.5 ms: there the all-reduce outweighed the saving.
    """
    one, top = strong[0], strong[-1]
    step1, step_w = one["global_batch"] / one["samples_per_s"], top["global_batch"] / top["samples_per_s"]
    comm_w = (top.get("comm_share") or 0.0) * step_w  # the all-reduce pending per step, timed in the run
    comm_1 = (one.get("comm_share") or 0.0) * step1
    head = (f"The step time did not shrink with the per-rank batch: {1e3 * step_w:.3g} ms per step on "
            f"{top['world_size']} ranks ({top['per_rank_batch']} samples each) against {1e3 * step1:.3g} ms on "
            f"{one['world_size']} ({one['per_rank_batch']})")
    advice = f"measure again, or give each rank more samples ({NVIDIA_NCF_QUOTE})."
    if comm_w <= comm_1:  # no all-reduce timed on the larger size: nothing to split the step by
        return (head + ", so fixed costs (the optimizer's step over every parameter, the all-reduce, launches) or "
                "noise dominate: " + advice)
    rest_w, rest_1 = step_w - comm_w, step1 - comm_1
    head += (f"; its all-reduce, which the {top['world_size']}-rank run pays and one rank does not, was pending "
             f"{1e3 * comm_w:.3g} ms of it (timed), and without that time the step would take {1e3 * rest_w:.3g} ms")
    if rest_w < rest_1:
        return (head + ", below one rank's: the all-reduce can account for it (it outweighed what the smaller share "
                "saved, as far as the step waited for it), so the fit gives no split into a fixed and a per-sample "
                "cost: " + advice)
    times = one["per_rank_batch"] / top["per_rank_batch"]
    return (head + f", still more than one rank's {1e3 * rest_1:.3g} ms at {times:.3g}x the samples per rank. The "
            "optimizer's step over every parameter and the launches, which one rank pays too, cannot make a step with "
            f"fewer samples slower: the rest of the {top['world_size']}-rank step grew (its forward and backward, and "
            "whatever DDP adds besides the timed all-reduce), from the ranks sharing this machine's cores, DDP's own "
            "work, or the machine's load moving between the runs (no cell here measured which), so the fit gives no "
            "split: " + advice)


def _unresolved_fit(strong: list[dict], repeats=()) -> str:
    """Where another run of the largest strong-scaling setting (``repeats``: other seeds) took a step no shorter than
    one rank's, no split into a cost per step and a cost per sample fits it: the sentence that says so, else "".
    Read r8b 06-1 (eighth full run): "each step costs 13.61 ms whatever the batch ... plus 1.13 us per sample, so at
    8192 samples per rank 60% of the step does not shrink", fitted to a 2-rank run at 22.8 ms per step, while the same
    setting's second seed took 40.7 ms per step (efficiency 0.39), longer than one rank's 32.0 ms at twice the
    samples per rank, which :func:`_no_shrink_reading` says such a split cannot make."""
    one, top = strong[0], strong[-1]
    if one["world_size"] != 1 or not one.get("samples_per_s"):
        return ""
    step1 = one["global_batch"] / one["samples_per_s"]
    slower = [top["global_batch"] / r["samples_per_s"] for r in repeats if r.get("samples_per_s")]
    slower = [x for x in slower if x >= step1]
    if not slower:
        return ""
    times = one["per_rank_batch"] / top["per_rank_batch"]
    return (f"But the same setting at another seed took {1e3 * max(slower):.3g} ms per step, no shorter than one "
            f"rank's {1e3 * step1:.3g} ms at {times:.3g}x the samples per rank, which no such split fits: between "
            "runs of one setting the step moved more than the split, so these runs give no fixed cost and no "
            "per-rank batch from which compute would dominate (rerun on a quieter machine, or with more sizes).")


def _negative_intercept_reading(strong: list[dict], fixed: float, per_sample: float, allreduce: float,
                                last: bool = True) -> str:
    """Where :func:`step_time_fit`'s intercept came out below zero: what the fit gives, and that it gives no fixed cost.

    Read r11 06-C1 (eleventh full run): "each step costs 0 ms whatever the batch (optimizer step over every parameter,
    launches) plus ... us per sample", the fit's intercept (-1.95 ms) read as 0, while lesson 05 had timed NeuMF's
    optimizer step alone at 3.99 ms; the intercept's sign moved with which seed's run the table held. No cost per step
    is below zero, so the line through these sizes resolves none, and no per-rank batch is read from it."""
    top = strong[-1]
    why = (f"on {top['world_size']} ranks the timed all-reduce was pending {1e3 * allreduce:.3g} ms per step, taken "
           "out before the fit (one rank does not pay it), and pending time also counts all-reduce time that "
           "overlapped compute, so it can over-count what the step waited for" if allreduce > 0 else
           "no all-reduce was timed, so the line mixes it into both terms")
    return (f"Fitted over the {len(strong)} sizes, the line gives {1e6 * per_sample:.3g} us per sample and an "
            f"intercept below zero ({1e3 * fixed:.3g} ms per step), which no cost per step can be: every step pays the "
            "optimizer's step over every parameter (the mixed-precision lesson timed it apart). So these runs resolve "
            f"no fixed cost, and no share of the step that does not shrink ({why})"
            + ("; they give no per-rank batch from which compute would dominate: rerun on a quieter machine, or with "
               "more sizes." if last else "."))


def scaling_reading(rows: list[dict], compute_share: float = 0.8, repeats=()) -> str:
    """What the learner's own strong-scaling rows show, and the per-rank batch that would scale.

    From :func:`step_time_fit`: the share of the largest run's step that does not shrink
    with the per-rank batch, and the per-rank batch at which compute would be
    ``compute_share`` of the step (a power of two). True on any tier: every number is read
    from ``rows``. ``repeats``: more runs of the largest setting (other seeds, :func:`optimization_reading`'s); their
    efficiency is set beside the table's (read r6b 06-2: the sixth run's table read 0.29 from a 2-rank run at
    453,650 samples/s, and the same setting's second seed ran about 1.8x faster).
    """
    strong = sorted((r for r in rows if r["mode"] == "strong"), key=lambda r: r["world_size"])
    if len(strong) < 2:
        return "one data-parallel size only: no scaling to read (a machine with more devices adds the others)."
    top = strong[-1]
    eff = top["efficiency"]
    lead = (f"strong scaling to {top['world_size']} ranks at a global batch of {top['global_batch']} "
            f"({top['per_rank_batch']} per rank): efficiency {eff:.2f}" if eff is not None else
            f"strong scaling to {top['world_size']} ranks")
    one = strong[0]
    others = [r["samples_per_s"] / (one["samples_per_s"] * top["world_size"]) for r in repeats
              if r.get("samples_per_s") and one.get("samples_per_s") and one["world_size"] == 1]
    if eff is not None and others:
        lead += (f" (the table's run; the same setting at another seed ran at efficiency "
                 f"{', '.join(f'{e:.2f}' for e in others)}: how far one run's pace moves it)")
    fit = step_time_fit(rows)
    if fit is None or fit[1] <= 0:
        return lead + ". " + _no_shrink_reading(strong)
    fixed, per_sample = fit
    step = top["global_batch"] / top["samples_per_s"]
    allreduce = _allreduce_per_step(top)  # timed in the run: paid on every step of the largest size, whatever its batch
    if fixed < 0:
        unresolved = _unresolved_fit(strong, repeats)
        return (lead + ". " + _negative_intercept_reading(strong, fixed, per_sample, allreduce, last=not unresolved)
                + (" " + unresolved if unresolved else ""))
    fixed_share = min(1.0, max(0.0, (fixed + allreduce) / step))
    # read f12d 06-H2 (twelfth full run): "each step costs 7.19 ms whatever the batch (optimizer step over every
    # parameter, launches)": the intercept's parts named as if timed, while no cell of this lesson timed them (lesson
    # 05's phase table, on its own threads, put the optimizer and the sampling at about a third of 7.19 ms). The
    # intercept is said as what it is: what a step pays whatever its batch, not split into parts here
    if allreduce > 0:
        cost = (f"each step costs {1e3 * fixed:.3g} ms whatever the batch (the fit's intercept: no cell of this lesson "
                f"timed its parts) plus "
                f"{1e6 * per_sample:.3g} us per sample, and on {top['world_size']} ranks "
                f"the timed all-reduce, pending {1e3 * allreduce:.3g} ms per step (taken out before the fit: one rank "
                "does not pay it)")
    else:
        cost = (f"each step costs {1e3 * fixed:.3g} ms whatever the batch (the fit's intercept: no cell of this lesson "
                f"timed its parts, and with no all-reduce timed it holds the {top['world_size']}-rank run's all-reduce "
                f"too) plus "
                f"{1e6 * per_sample:.3g} us per sample")
    unresolved = _unresolved_fit(strong, repeats)
    if unresolved:
        return (lead + f". Fitted over the {len(strong)} sizes with the table's run, "
                + cost.replace("costs", "would cost", 1)
                + f" ({fixed_share:.0%} of the {top['world_size']}-rank step). " + unresolved)
    need = compute_share / (1 - compute_share) * (fixed + allreduce) / per_sample
    suggest = 1 << max(0, math.ceil(math.log2(max(need, 1.0))))
    # #37 (full run of 2026-12-01): the reference was compared with the power of two (262,144: "2x above"), not
    # with the fit's 141,000 (1.1x): the fit's own figure, to 2 significant figures, is what is compared
    about = int(float(f"{max(need, 1.0):.2g}"))
    points = len([r for r in strong if r["samples_per_s"]])
    caveat = ""
    if points == 2:
        # two points: a line through them, not a test of the model
        caveat = (f" A line through {points} points fits them exactly: a tendency, not a measured split (a cost per "
                  "sample that does not grow linearly lands in the intercept too"
                  + ("; and the pending time is at most what the step waited for the all-reduce)."
                     if allreduce > 0 else
                     f"); only the {top['world_size']}-rank point pays the all-reduce, and with none timed, the fixed "
                     "cost mixes it with what every step pays."))
    return (lead + f". Fitted over the {points} sizes: {cost}, so at {top['per_rank_batch']} samples per rank "
            f"{fixed_share:.0%} of the step does not "
            f"shrink when ranks are added. Compute would be {compute_share:.0%} of the step from about {about:,} "
            f"samples per rank (the next power of two: {suggest:,}, a global batch of "
            f"{suggest * top['world_size']:,} on {top['world_size']} ranks); the fit's {about:,} is "
            f"{_against_reference(about)}.{caveat}")


ONE_RUN_RESOLUTION = 0.3  # what one run each resolves on a shared machine: "a few tens of percent" (lesson 06)


def optimization_reading(rows: list[dict], eval_every_epochs: float, repeats=(), pace: dict | None = None) -> str:
    """Whether strong scaling kept the optimization and weak scaling changed it, and what the largest
    run gained in time to target over one rank: read from the rows.

    Epochs to target are measured at evaluation points ``eval_every_epochs`` apart (closer near the target:
    each row's ``resolution_epochs``, from its run's ``dense_eval_every_epochs``, is used when given), so two
    runs whose epochs to target differ by less than one interval are the same within the measurement.
    Runs that did not reach the target are compared by final HR@10.

    Whether data parallelism shortened the course's run is one verdict, the ladder's "+data parallel" row
    (against the rung it built on, a single process on every core): this reading compares ranks at the
    same threads per rank, and says so rather than give a second verdict.

    ``repeats``: more runs (records) of the largest strong-scaling setting, at other seeds (the ladder rung's
    confirming runs). The time-to-target verdict then reads every run of that setting: where one rank's time lies
    within their range, or within one run's resolution of the nearest of them, it gives none (read r6b 06-2, sixth
    full run: "10.3 s on 2 ranks against 5.96 s on one rank ..., 1.7x slower: adding ranks lengthened the run", and
    the same 2-rank setting's second seed, later in the lesson, took 5.7 s for the same 285 steps).

    ``pace``: the yardstick's pace timed before and after this lesson's runs (:meth:`course_lib.ladder.Pace.finish`'s
    record). A time-to-target verdict then resolves no less than the pace moved: the seconds of runs minutes apart
    differ by that much with nothing else changed (read f12d 06-H1, twelfth full run: "every run faster than one rank
    by more than 5% (the runs of one setting differed by 1.6%; at least 5%): the ranks scaled" on 6.576 s against
    6.257 and 6.158 s, 1.051x, while the yardstick's pace moved -9% over the same lesson, 97,017 to 88,315 samples/s).
    """
    parts = []
    # the resolution the runs had: near the target they evaluated every dense_eval_every_epochs (ladder.NEAR_TARGET)
    res = min([eval_every_epochs] + [r["resolution_epochs"] for r in rows if r.get("resolution_epochs")])
    for mode in ("strong", "weak"):
        rs = sorted((r for r in rows if r["mode"] == mode), key=lambda r: r["world_size"])
        if len(rs) < 2:
            continue
        lo, hi = rs[0], rs[-1]
        sizes = (f"{lo['world_size']} and {hi['world_size']} ranks "
                 f"(global batch {lo['global_batch']} and {hi['global_batch']})")
        if lo["epochs_to_target"] is not None and hi["epochs_to_target"] is not None:
            d = hi["epochs_to_target"] - lo["epochs_to_target"]
            status = "same" if abs(d) <= res + 1e-9 else "changed"
            if status == "same":
                what = (f"no measurable change in epochs to target between {sizes}: {lo['epochs_to_target']:.3g} and "
                        f"{hi['epochs_to_target']:.3g}, within one evaluation interval ({res:g} epochs)")
            else:
                what = (
                    f"epochs to target {'grew' if d > 0 else 'shrank'} from {lo['epochs_to_target']:.3g} to "
                    f"{hi['epochs_to_target']:.3g} between {sizes}, more than one evaluation interval ({res:g} epochs)"
                )
        else:
            status = "unreached"
            reached = [r["world_size"] for r in (lo, hi) if r["epochs_to_target"] is not None]
            what = (f"{'only ' + str(reached[0]) + ' rank(s)' if reached else 'neither run'} "
                    f"reached the target between "
                    f"{sizes}; final HR@10 {lo['final_hr']:.4f} and {hi['final_hr']:.4f}")
        if mode == "strong":
            lead = "Strong scaling (the same global batch)"
            same = "as it must: the same batch and the same sample order make it the same optimization"
            changed = ("which strong scaling should not do: the same global batch is the same optimization, "
                       "so check the batch arithmetic or the evaluation points")
        else:
            lead = "Weak scaling (the global batch grows with the ranks)"
            same = ("so at these batches the larger global batch cost no extra epochs here, and each rank's "
                    "throughput is the whole gain")
            changed = "the larger global batch changed the optimization (lessons 02-04: lr rules, warmup, LARS)"
        parts.append(f"{lead}: {what}" + {"same": f", {same}.", "changed": f"; {changed}.", "unreached": "."}[status])
    strong = sorted((r for r in rows if r["mode"] == "strong"), key=lambda r: r["world_size"])
    one = next((r for r in strong if r["world_size"] == 1), None)
    top = strong[-1] if strong else None
    from ..ladder import pace_drift

    drift = pace_drift(pace)
    if one is not None and top is not None and top is not one:
        t1, tw = one["time_to_target_s"], top["time_to_target_s"]
        more = [r["time_to_target_s"] for r in repeats if r.get("time_to_target_s")]
        if t1 and tw and more:
            times = [tw, *more]
            lo, hi = min(times), max(times)
            listed = " and ".join(f"{t:.3g}" for t in times)
            steps = sorted({r.get("steps_to_target") for r in [top, *repeats] if r.get("steps_to_target")})
            same = f", the same {steps[0]} steps" if len(steps) == 1 else ""
            head = (f"Time to target: {listed} s on {top['world_size']} ranks ({len(times)} runs of one setting at "
                    f"different seeds{same}: {hi / lo:.3g}x apart) against {t1:.3g} s on one rank of the same threads")
            nearest = lo if t1 < lo else hi
            # the resolution these runs had: how far the runs of one setting moved (at least PAIRED_MIN_EFFECT), not a
            # constant (read r10c 06-H2, tenth full run: "one rank's time is within the 30% one run can resolve ...
            # so these runs do not say whether the ranks scaled" for 12.04 s against 9.8 and 9.35 s, 5% apart)
            spread = hi / lo - 1
            res = max(spread, PAIRED_MIN_EFFECT, abs(drift) if drift is not None else 0.0)
            if drift is not None and abs(drift) > max(spread, PAIRED_MIN_EFFECT):
                # read f12d 06-H1: the yardstick moved more than the runs of one setting did
                resolved = (f"{res:.0%} (the yardstick's pace moved {drift:+.0%} over this lesson's runs, more than "
                            f"the {spread:.1%} the runs of one setting differed by)")
            elif spread >= PAIRED_MIN_EFFECT:
                resolved = f"the {res:.0%} the runs of one setting differed by"
            else:
                resolved = (f"{res:.0%} (the runs of one setting differed by {spread:.1%}; "
                            f"at least {PAIRED_MIN_EFFECT:.0%})")
            if lo <= t1 <= hi:
                verdict = ("one rank's time lies within the range of the runs of one setting, so these runs do not say "
                           "whether the ranks scaled")
            elif abs(math.log(t1 / nearest)) <= math.log(1 + res):
                verdict = (f"one rank's time is within {resolved} of the nearest of them, so these runs do not say "
                           "whether the ranks scaled")
            else:
                faster = t1 > hi
                verdict = (f"every run {'faster' if faster else 'slower'} than one rank by more than {resolved}: "
                           + ("the ranks scaled" if faster else "adding ranks lengthened the run"))
            parts.append(head + f" (the table's run: time-to-target efficiency {top['ttt_efficiency']:.2f}): "
                         + verdict + ". Whether data parallelism beat one process using all the same cores is the "
                         "ladder's '+data parallel' row below, the lesson's one verdict on it.")
        elif t1 and tw:
            ratio = t1 / tw
            how = f"{ratio:.2g}x faster" if ratio >= 1 else f"{1 / ratio:.2g}x slower"
            # #37 (full run 2026-12-01): "1.1x faster (...; one run each, so rerun before trusting a few tens of
            # percent): the ranks scaled": the verdict contradicted its own resolution. One run each resolves
            # ONE_RUN_RESOLUTION (a few tens of percent); a ratio within it gets no verdict
            if drift is not None and abs(drift) > ONE_RUN_RESOLUTION and abs(math.log(ratio)) <= math.log1p(abs(drift)):
                # read f12d 06-H1: a pace that moved more than one run resolves is the resolution
                verdict = (f"within the {abs(drift):.0%} the yardstick's pace moved over this lesson's runs (more than "
                           f"the {ONE_RUN_RESOLUTION:.0%} one run each can resolve on a shared machine), so these two "
                           "runs do not say whether the ranks scaled")
            elif abs(math.log(ratio)) <= math.log(1 + ONE_RUN_RESOLUTION):
                verdict = (f"within the {ONE_RUN_RESOLUTION:.0%} one run each can resolve on a shared machine, so "
                           "these two runs do not say whether the ranks scaled")
            else:
                verdict = "the ranks scaled" if ratio >= 1 else "adding ranks lengthened the run"
            parts.append(f"Time to target: {tw:.3g} s on {top['world_size']} ranks against {t1:.3g} s on one rank of "
                         f"the same threads, {how} (time-to-target efficiency {top['ttt_efficiency']:.2f}; one run "
                         f"each): " + verdict
                         + ". Whether data parallelism beat one process using all the same cores is the ladder's "
                         "'+data parallel' row below, the lesson's one verdict on it.")
        else:
            parts.append("Time to target: not reached by " + " and ".join(
                f"{r['world_size']} rank(s)" for r in (one, top) if not r["time_to_target_s"]) + ", so no comparison.")
    return " ".join(parts) or "one data-parallel size only: nothing to compare."


def scaling_table(rows: list[dict]) -> Table:
    t = Table(["mode", "ranks", "global batch", "per-rank batch", "samples/s", "speedup", "efficiency",
               "time to target (s)", "epochs to target", "comm (s)", "comm share", "comm measured by",
               "final HR@10"],
              title="Strong scaling (fixed global batch) and weak scaling (fixed per-rank batch)")
    for r in rows:
        t.add(**{"mode": r["mode"], "ranks": r["world_size"], "global batch": r["global_batch"],
                 "per-rank batch": r["per_rank_batch"], "samples/s": r["samples_per_s"],
                 "speedup": r["speedup"], "efficiency": r["efficiency"],
                 "time to target (s)": r["time_to_target_s"] if r["time_to_target_s"] is not None else "not reached",
                 "epochs to target": r["epochs_to_target"], "comm (s)": r["comm_s"],
                 "comm share": f"{r['comm_share']:.0%}" if r["comm_share"] is not None else None,
                 "comm measured by": r["comm_method"] or "—", "final HR@10": r["final_hr"]})
    return t


def plot_scaling(rows: list[dict]):
    """Two panels: samples/s vs ranks (with the ideal line) and scaling efficiency vs ranks."""
    fig, (ax_t, ax_e) = plt.subplots(1, 2, figsize=(10, 3.6))
    for mode, color in (("strong", "tab:blue"), ("weak", "tab:orange")):
        rs = [r for r in rows if r["mode"] == mode]
        if not rs:
            continue
        w = [r["world_size"] for r in rs]
        ax_t.plot(w, [r["samples_per_s"] for r in rs], "o-", color=color, label=f"{mode} scaling")
        base = next((r["samples_per_s"] for r in rs if r["world_size"] == 1), None)
        if base:
            ax_t.plot(w, [base * x for x in w], ":", color=color, label=f"ideal ({mode})")
        ax_e.plot(w, [r["efficiency"] for r in rs], "o-", color=color, label=mode)
    ax_t.set(xlabel="ranks", ylabel="training samples/s", title="throughput")
    ax_e.axhline(1.0, color="gray", ls=":", lw=1)
    ax_e.set(xlabel="ranks", ylabel="efficiency = speedup / ranks", title="scaling efficiency", ylim=(0, 1.2))
    for ax in (ax_t, ax_e):
        ax.set_xticks(sorted({r["world_size"] for r in rows}))
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
