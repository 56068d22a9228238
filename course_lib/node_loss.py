"""Which node a lost peer was: the message a multi-node job ends with when a node dies (lesson 13).

When a node goes (its power, its kernel, its processes SIGKILLed), the ranks on the other nodes learn
it from their pending collective: gloo's TCP pair says ``Read error [198.18.0.2]:28838: Connection
reset by peer`` (measured on the virtual cluster, course_lib/cluster.py: about 3 s after the kill,
far inside the 300 s collective timeout) -- an address and a port, no node, no rank. At start-up each
rank therefore shares its (hostname, address) with the others (:func:`rank_table`, one
``all_gather_object``); :func:`explain` turns the transport's error into one that names the lost
node and the ranks that ran there, and torchrun's "Root Cause" summary then shows that.

The address is the one gloo uses: the address the node's hostname resolves to (gloo binds it unless
``GLOO_SOCKET_IFNAME`` names an interface, see course_lib/dist.py).
"""

from __future__ import annotations

import os
import re
import socket

# gloo's pair.cc: "Read error [ADDR]:PORT: Connection reset by peer" / "Connection closed by peer [ADDR]:PORT"
_PEER = re.compile(r"\[([0-9a-fA-F.:]+)\]:(\d+)")
_LOST = re.compile(r"connection (reset|closed) by peer|socket closed|broken pipe|remote process exited",
                   re.IGNORECASE)


def this_host() -> dict:
    """This process's node: its hostname and the address that hostname resolves to (what gloo binds)."""
    name = socket.gethostname()
    try:
        address = socket.gethostbyname(name)
    except OSError:
        address = None
    return {"host": name, "address": address}


def rank_table() -> list[dict]:
    """Every rank's ``{"rank", "host", "address"}``, gathered once from all ranks (a collective: every
    rank calls it); just this process's entry when there is no process group."""
    import torch.distributed as dist

    mine = {"rank": dist.get_rank() if dist.is_initialized() else 0, **this_host()}
    if not (dist.is_initialized() and dist.get_world_size() > 1):
        return [mine]
    table: list = [None] * dist.get_world_size()
    dist.all_gather_object(table, mine)
    return table


def lost_peer(message: str, table: list[dict]) -> dict | None:
    """The node a peer-lost error points at: ``{"host", "address", "ranks"}``, else None (another error)."""
    if not _LOST.search(message):
        return None
    m = _PEER.search(message)
    if not m:
        return None
    address = m.group(1)
    ranks = sorted(e["rank"] for e in table if e.get("address") == address)
    hosts = sorted({e["host"] for e in table if e.get("address") == address})
    return {"host": ", ".join(hosts) if hosts else None, "address": address, "ranks": ranks}


def explain(exc: BaseException, table: list[dict], rank: int) -> str | None:
    """One line for a rank whose collective failed because a node went away, naming it and its ranks."""
    lost = lost_peer(str(exc), table)
    if lost is None:
        return None
    where = f"node {lost['host']} ({lost['address']})" if lost["host"] else f"the node at {lost['address']}"
    ranks = (f"rank {lost['ranks'][0]}" if len(lost["ranks"]) == 1
             else f"ranks {', '.join(map(str, lost['ranks']))}") if lost["ranks"] else "no rank of this job"
    return (f"rank {rank} on {this_host()['host']} lost its connection to {where}, where {ranks} ran: that node "
            f"or its processes are gone (pid {os.getpid()} saw: {str(exc).splitlines()[0][:300]}). Resubmit the "
            "job with the same --checkpoint-dir to resume from its last checkpoint.")
