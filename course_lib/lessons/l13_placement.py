"""Lesson 13's data placement: each node reading its shard of the input from a folder the first node serves over
its link, against every node reading the whole set; measured on the virtual cluster, else predicted."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from .. import cluster as vc
from .. import compare
from ..tables import Table
from .l13_multi_node import TIMING_RESOLUTION

PLACEMENTS = ("shard per node", "whole set")
PLACEMENT_PORT = 8070


def _fetch() -> None:
    """A node's read of its files over HTTP, timed from the first request to the last byte (run as a script)."""
    import json
    import sys
    import time
    import urllib.request

    base, *names = sys.argv[1:]
    start, got = time.perf_counter(), 0
    for name in names:
        with urllib.request.urlopen(f"{base}/{name}", timeout=300) as r:
            while chunk := r.read(1 << 20):
                got += len(chunk)
    print(json.dumps({"bytes": got, "seconds": time.perf_counter() - start}))


FETCH = inspect.getsource(_fetch) + "\n_fetch()\n"


def write_shards(spec: dict, folder: str | os.PathLike, nodes: int) -> list[str]:
    """The training interactions as ``nodes`` contiguous shards of int32 (user, item) in ``folder``; their names."""
    import numpy as np

    from ..train.workers import RunSpec, load_data

    data = load_data(RunSpec(**spec))
    pairs = np.stack([data.train_users.numpy(), data.train_items.numpy()], axis=1).astype(np.int32)
    names = [f"shard-{k:03d}-of-{nodes:03d}.npy" for k in range(nodes)]
    for name, part in zip(names, np.array_split(pairs, nodes)):
        np.save(Path(folder) / name, part)
    return names


def measure_placement(cluster: vc.Cluster, spec: dict, workdir: str | os.PathLike, timeout_s: float = 300.0) -> dict:
    """Every node reads its input from the folder node0 serves over HTTP (as an NFS server or a head node would),
    all nodes at once, for each placement: rows ``{"placement", "node", "bytes", "seconds"}``."""
    folder = Path(workdir) / "shared-input"
    folder.mkdir()
    names = write_shards(spec, folder, len(cluster.nodes))
    head = cluster.nodes[0]
    server = cluster.popen(head.name, [sys.executable, "-m", "http.server", "--bind", head.address,
                                       str(PLACEMENT_PORT), "--directory", str(folder)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    fetch = [sys.executable, "-c", FETCH, f"http://{head.name}:{PLACEMENT_PORT}"]
    rows = []
    try:
        deadline = time.monotonic() + 30
        while cluster.run(head.name, fetch + names[:1], capture_output=True, timeout=30).returncode != 0:
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError(f"the file server on {head.name} did not start (exit {server.poll()})")
            time.sleep(0.2)
        for placement in PLACEMENTS:
            reads = [[name] for name in names] if placement == PLACEMENTS[0] else [names] * len(names)
            procs = [cluster.popen(n.name, fetch + files, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                     for n, files in zip(cluster.nodes, reads)]
            for n, p in zip(cluster.nodes, procs):
                out, err = p.communicate(timeout=timeout_s)
                if p.returncode != 0:
                    raise RuntimeError(f"reading the input on {n.name} failed ({p.returncode}): {err[-2000:]}")
                rows.append({"placement": placement, "node": n.name, **json.loads(out)})
    finally:
        server.kill()
        server.wait()
    return {"rows": rows, "total_bytes": sum((folder / n).stat().st_size for n in names),
            "nodes": len(cluster.nodes), "source": "virtual"}


def predicted_placement(total_bytes: int, nodes: int, rate_bits_per_s: float) -> dict:
    """The same reads priced: the serving node's link carries what the other nodes read (it reads its own files
    locally), so the last node has its input after that many bytes at the rate."""
    rows = []
    for placement, per_node in zip(PLACEMENTS, (total_bytes / nodes, total_bytes)):
        last = per_node * (nodes - 1) * 8 / rate_bits_per_s
        rows += [{"placement": placement, "node": f"node{k}", "bytes": per_node, "seconds": last if k else 0.0}
                 for k in range(nodes)]
    return {"rows": rows, "total_bytes": total_bytes, "nodes": nodes, "source": "model"}


def placement_summary(result: dict) -> list[dict]:
    """Per placement: the most bytes a node read, and the start-up (the slowest node's read)."""
    by = {p: [r for r in result["rows"] if r["placement"] == p] for p in PLACEMENTS}
    return [{"placement": p, "bytes_per_node": max(r["bytes"] for r in mine),
             "startup_s": max(r["seconds"] for r in mine), "nodes": len(mine)} for p, mine in by.items() if mine]


def placement_table(result: dict) -> Table:
    label = "PREDICTED (no cluster)" if result["source"] == "model" else "measured"
    return Table(["placement", "bytes per node", "of the set", "start-up s"],
                 [{"placement": r["placement"], "bytes per node": f"{r['bytes_per_node']:,.0f}",
                   "of the set": f"{r['bytes_per_node'] / result['total_bytes']:.0%}", "start-up s": r["startup_s"]}
                  for r in placement_summary(result)], title=f"{result['nodes']} nodes, {label}")


def placement_comparisons(result: dict) -> list[compare.Comparison]:
    """The start-up with the whole set over a shard per node (above 1: sharding shortened it); measured runs only,
    each read once, so the interval is the timing resolution."""
    by = {r["placement"]: r["startup_s"] for r in placement_summary(result)}
    if result["source"] == "model" or set(by) != set(PLACEMENTS) or by[PLACEMENTS[0]] <= 0:
        return []
    return [compare.ratio("start-up, whole set / shard", [by[PLACEMENTS[0]]], [by[PLACEMENTS[1]]],
                          needed=compare.TIME_EFFECT, resolution=TIMING_RESOLUTION, basis="one read each")]
