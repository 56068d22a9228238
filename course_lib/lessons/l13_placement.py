"""Lesson 13's data placement: each node reading only its shard of the input from a shared folder the first
node serves over its link, against every node reading the whole set (:func:`measure_placement`; on SLURM and
without a cluster, :func:`predicted_placement` from the link's rate, labelled as a prediction)."""

from __future__ import annotations

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

# What a node runs to read its input: every file named, over HTTP from the node that holds the shared folder (on the
# virtual cluster: node0, as an NFS server or a head node would serve it), timed from the first request to the
# last byte. Standard library only.
FETCH = """
import json, sys, time, urllib.request
base, names = sys.argv[1], sys.argv[2:]
start, got = time.perf_counter(), 0
for name in names:
    with urllib.request.urlopen(base + "/" + name, timeout=300) as r:
        while chunk := r.read(1 << 20):
            got += len(chunk)
print(json.dumps({"bytes": got, "seconds": time.perf_counter() - start}))
"""
PLACEMENTS = ("a shard per node", "the whole set on every node")
PLACEMENT_PORT = 8070


def write_shards(spec: dict, folder: str | os.PathLike, nodes: int) -> list[str]:
    """The training interactions of ``spec``'s data as ``nodes`` shard files (int32 user and item columns, one
    contiguous slice each, ``np.save``) in ``folder``; their names."""
    import numpy as np

    from ..train.workers import RunSpec, load_data

    data = load_data(RunSpec(**spec))
    pairs = np.stack([data.train_users.numpy(), data.train_items.numpy()], axis=1).astype(np.int32)
    names = []
    for k, part in enumerate(np.array_split(pairs, nodes)):
        names.append(f"shard-{k:03d}-of-{nodes:03d}.npy")
        np.save(Path(folder) / names[-1], part)
    return names


def placement_files(placement: str, names: list[str], node: int) -> list[str]:
    """The files ``node`` reads: its own shard, or all of them."""
    if placement not in PLACEMENTS:
        raise ValueError(f"placement {placement!r}: choose one of {PLACEMENTS}")
    return [names[node]] if placement == PLACEMENTS[0] else list(names)


def measure_placement(cluster: vc.Cluster, spec: dict, workdir: str | os.PathLike, timeout_s: float = 300.0) -> dict:
    """Every node reads its input from the shared folder that node0 serves over its link, all nodes at once, for
    each placement: rows ``{"placement", "node", "bytes", "seconds"}`` and ``total_bytes`` (the whole set)."""
    folder = Path(workdir) / "shared-input"
    folder.mkdir()
    names = write_shards(spec, folder, len(cluster.nodes))
    head = cluster.nodes[0]
    server = cluster.popen(head.name, [sys.executable, "-m", "http.server", "--bind", head.address,
                                       str(PLACEMENT_PORT), "--directory", str(folder)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    base = f"http://{head.name}:{PLACEMENT_PORT}"
    rows = []
    try:
        deadline = time.monotonic() + 30
        while cluster.run(head.name, [sys.executable, "-c", FETCH, base, names[0]], capture_output=True,
                          timeout=30).returncode != 0:  # until the server answers
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError(f"the file server on {head.name} did not start (exit {server.poll()})")
            time.sleep(0.2)
        for placement in PLACEMENTS:
            procs = [cluster.popen(n.name, [sys.executable, "-c", FETCH, base,
                                            *placement_files(placement, names, k)],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                     for k, n in enumerate(cluster.nodes)]
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
    """Lesson 09's kind of arithmetic for the same reads: the serving node's link carries what the other nodes
    read (it reads its own files locally), so the last node has its input after that many bytes at the rate."""
    rows = []
    for placement in PLACEMENTS:
        per_node = total_bytes / nodes if placement == PLACEMENTS[0] else total_bytes
        over_link = per_node * (nodes - 1)
        for k in range(nodes):
            rows.append({"placement": placement, "node": f"node{k}", "bytes": per_node,
                         "seconds": over_link * 8 / rate_bits_per_s if k else 0.0})
    return {"rows": rows, "total_bytes": total_bytes, "nodes": nodes, "source": "model"}


def placement_summary(result: dict) -> list[dict]:
    """Per placement: bytes read per node (the largest) and the start-up time (the slowest node: the job
    starts when every node has its input)."""
    out = []
    for placement in PLACEMENTS:
        mine = [r for r in result["rows"] if r["placement"] == placement]
        if mine:
            out.append({"placement": placement, "bytes_per_node": max(r["bytes"] for r in mine),
                        "startup_s": max(r["seconds"] for r in mine), "nodes": len(mine)})
    return out


def placement_table(result: dict):
    label = "PREDICTED (no cluster)" if result["source"] == "model" else "measured"
    t = Table(["placement", "bytes read per node", "of the whole set", "start-up (s), slowest node"],
              title=f"input placement on {result['nodes']} nodes, the shared folder served by node0 ({label})")
    for r in placement_summary(result):
        t.add(**{"placement": r["placement"], "bytes read per node": f"{r['bytes_per_node']:,.0f}",
                 "of the whole set": f"{r['bytes_per_node'] / result['total_bytes']:.0%}",
                 "start-up (s), slowest node": r["startup_s"]})
    return t



def placement_comparisons(result: dict) -> list[compare.Comparison]:
    """The start-up (the slowest node's read) with the whole set on every node over a shard per node: above 1,
    sharding shortened it. Measured runs only (a prediction is the table's); each placement read once, so its
    interval is the timing resolution."""
    by = {r["placement"]: r for r in placement_summary(result)}
    if result["source"] == "model" or set(by) != set(PLACEMENTS) or by[PLACEMENTS[0]]["startup_s"] <= 0:
        return []
    return [compare.ratio("start-up, the whole set / a shard per node", [by[PLACEMENTS[0]]["startup_s"]],
                          [by[PLACEMENTS[1]]["startup_s"]], needed=compare.TIME_EFFECT, resolution=TIMING_RESOLUTION,
                          basis="one read each; timing resolution")]
