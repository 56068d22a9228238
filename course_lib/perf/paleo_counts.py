"""Paleo's first half with the course's counter: the training step of any ``torch.nn.Module`` classifier, every
operation counted on PyTorch's ``meta`` device (shapes, no values: AlexNet at batch 2048 counts in a second and no
memory), through the course's :class:`~course_lib.train.engine.Engine` with Paleo's update, plain SGD.
:mod:`.paleo` prices the counts on a datasheet device and adds Paleo's communication."""

from __future__ import annotations

from functools import lru_cache

import torch

from ..parallel.data_parallel import DataParallel
from ..precision import Precision
from ..train.engine import Engine
from . import model as M
from . import paleo_nets as N


def cross_entropy_sum(net, micro):
    """The engine's ``loss_sum``: cross-entropy summed over the batch."""
    x, y = micro
    return torch.nn.functional.cross_entropy(net(x), y, reduction="sum")


def count_module_step(model: torch.nn.Module, input_shape, batch: int, lr: float = 0.01) -> M.StepCounts:
    """One training step of the classifier ``model`` counted on the ``meta`` device (``model`` is moved there:
    its weights are dropped)."""
    meta = torch.device("meta")
    model = model.to(meta).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, foreach=True)
    engine = Engine(model, optimizer, precision=Precision("fp32", meta), parallel=DataParallel(batch, None, meta),
                    loss_sum=cross_entropy_sum)
    x = torch.empty((batch, *input_shape), device=meta)
    y = torch.zeros(batch, dtype=torch.long, device=meta)
    return M.count_step(engine, (x, y), batch_size=batch)


@lru_cache(maxsize=8)
def net_counts(name: str) -> tuple[M.StepCounts, M.StepCounts]:
    """Steps of one of :data:`.paleo_nets.NETS` counted at batch 1 and 2 (every count is linear in the batch)."""
    with torch.device("meta"):
        one, two = N.build(name), N.build(name)
    return count_module_step(one, one.input_shape, 1), count_module_step(two, two.input_shape, 2)
