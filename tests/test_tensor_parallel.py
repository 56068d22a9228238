"""course_lib.parallel.tensor in one process: the layers reduce to the full layer when there is one
rank (no process group), and shards cover the features exactly. The multi-rank equality (2 and 4
gloo ranks, sizes that do and do not divide) is in tests/test_model_parallel.py."""

import copy

import pytest
import torch
from torch import nn

from course_lib.comm.collectives import chunk_bounds
from course_lib.models.bert import Block, bert_config
from course_lib.parallel import tensor as T


def test_column_and_row_layers_equal_the_full_layer_on_one_rank():
    torch.manual_seed(0)
    full = nn.Linear(7, 5)
    x = torch.randn(3, 7)
    col = T.ColumnParallelLinear.from_linear(full, gather_output=True)
    row = T.RowParallelLinear.from_linear(full, input_is_parallel=False)
    assert torch.equal(col(x), full(x)) and torch.allclose(row(x), full(x))
    assert col.weight.shape == (5, 7) and row.weight.shape == (5, 7)


def test_parallel_block_equals_the_block_on_one_rank():
    torch.manual_seed(0)
    cfg = bert_config("tiny", hidden_size=12, num_heads=3, intermediate_size=30, dropout=0.0, attention_dropout=0.0)
    block = Block(cfg).eval()
    tp = T.parallel_block(block).eval()
    x = torch.randn(2, 4, 12)
    assert torch.allclose(tp(x), block(x), atol=1e-6)
    assert tp.attn.local_heads == 3 and len(tp.attn.qkv.rows) == 36


@pytest.mark.parametrize("heads,ranks", [(3, 2), (4, 4), (6, 4), (5, 3)])
def test_each_ranks_heads_cover_the_fused_qkv_rows_once(heads, ranks, monkeypatch):
    head_dim = 4
    seen = []
    for r in range(ranks):
        monkeypatch.setattr(T, "_rank_size", lambda group, r=r: (r, ranks))
        rows = T.head_rows(heads, head_dim)
        lo, hi = chunk_bounds(heads, ranks)[r]
        assert len(rows) == 3 * (hi - lo) * head_dim
        seen += rows.tolist()
    assert sorted(seen) == list(range(3 * heads * head_dim))


def test_column_layer_refuses_gather_with_custom_rows():
    with pytest.raises(ValueError, match="gather_output"):
        T.ColumnParallelLinear(4, 6, gather_output=True, rows=torch.tensor([0, 2]))


def test_the_mlp_keeps_its_full_layers_untouched():
    torch.manual_seed(0)
    block = Block(bert_config("tiny", hidden_size=8, num_heads=2, intermediate_size=16))
    before = copy.deepcopy(block.state_dict())
    T.parallel_block(block)
    assert all(torch.equal(before[k], v) for k, v in block.state_dict().items())
