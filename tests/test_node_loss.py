"""course_lib.node_loss: a lost peer's transport error becomes one naming the node and its ranks."""

from course_lib import node_loss

TABLE = [{"rank": 0, "host": "node0", "address": "198.18.0.1"}, {"rank": 1, "host": "node0", "address": "198.18.0.1"},
         {"rank": 2, "host": "node1", "address": "198.18.0.2"}, {"rank": 3, "host": "node1", "address": "198.18.0.2"}]
# what gloo raised on node0 when node1's processes were SIGKILLed (tests/test_multinode.py, torch 2.13)
GLOO = ("Got the following error when running the callback: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/"
        "gloo/transport/tcp/pair.cc:537] Read error [198.18.0.2]:28838: Connection reset by peer. This is typically "
        "caused by a remote worker hanging or bugs in the application.")


def test_a_reset_by_a_node_names_that_node_and_its_ranks():
    assert node_loss.lost_peer(GLOO, TABLE) == {"host": "node1", "address": "198.18.0.2", "ranks": [2, 3]}
    msg = node_loss.explain(RuntimeError(GLOO), TABLE, rank=0)
    assert "lost its connection to node node1 (198.18.0.2), where ranks 2, 3 ran" in msg
    assert "--checkpoint-dir" in msg


def test_other_errors_and_unknown_addresses_are_left_alone_or_said_plainly():
    assert node_loss.explain(RuntimeError("CUDA out of memory"), TABLE, rank=0) is None
    assert node_loss.explain(RuntimeError("Read error [198.18.0.2]:1: Timed out"), TABLE, rank=0) is None
    msg = node_loss.explain(RuntimeError("Connection closed by peer [10.0.0.9]:4242"), TABLE, rank=1)
    assert "the node at 10.0.0.9, where no rank of this job ran" in msg


def test_alone_the_table_is_this_process():
    (entry,) = node_loss.rank_table()
    assert entry["rank"] == 0 and entry["host"] == node_loss.this_host()["host"]
