"""Workers for tests/test_compression.py (spawned workers import functions by module and name)."""

import torch
import torch.distributed as dist


def _mlp_engine(method, lr=0.1):
    from course_lib.parallel.data_parallel import DataParallel
    from course_lib.precision import Precision
    from course_lib.train.engine import Engine

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    dev = torch.device("cpu")
    return Engine(model, torch.optim.SGD(model.parameters(), lr=lr), precision=Precision("fp32", dev),
                  parallel=DataParallel(8, None, dev, comm=method),
                  loss_sum=lambda net, micro: ((net(micro[0]).squeeze(1) - micro[1]) ** 2).sum())


def _flat(model):
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()


def methods_on_an_mlp(rank, world_size, steps):
    """Each method trains the same MLP ``steps`` plain-SGD steps through the course's Engine: final weights
    (every rank's), the weights before any step, bytes per step and the parameter count."""
    from course_lib.comm import compression as cc

    gen = torch.Generator().manual_seed(1)  # the same global batches on every rank
    batches = [(torch.randn(8, 16, generator=gen), torch.randn(8, generator=gen)) for _ in range(steps)]
    methods = {"fp32": cc.FullPrecision(), "local H=1": cc.LocalSGD(1), "local H=4": cc.LocalSGD(4),
               "topk all, EF": cc.TopK(1.0, True), "topk all, no EF": cc.TopK(1.0, False),
               "delayed": cc.DelayedAverage()}
    out = {}
    for name, method in methods.items():
        engine = _mlp_engine(method)
        out["initial"] = _flat(engine.model)
        for i, batch in enumerate(batches):
            engine.step(batch)
            if name == "delayed" and i == 0:
                out["delayed after one step"] = _flat(engine.model)
        out[name] = _flat(engine.model)
        out[name + " bytes/step"] = engine.parallel.recorder.bytes_per_step()
    out["num_params"] = out["initial"].numel()
    return out


def powersgd_on_bert_mini(rank, world_size, steps):
    """Bytes per step (from step 2, after torch's fp32 warm-up) of fp32 and PowerSGD ranks 1 and 4 on
    BERT-mini (the lesson's full-profile shape), as the recording hook counted them; and the weights agree."""
    from course_lib.comm import compression as cc
    from course_lib.models.bert import build_bert
    from course_lib.parallel.data_parallel import DataParallel
    from course_lib.precision import Precision
    from course_lib.train.engine import Engine

    dev = torch.device("cpu")
    out = {}
    for name, method in {"fp32": cc.FullPrecision(), "rank 1": cc.PowerSGD(1), "rank 4": cc.PowerSGD(4)}.items():
        torch.manual_seed(0)
        model = build_bert("mini", vocab_size=4096, max_position=32, dropout=0.0, attention_dropout=0.0)
        engine = Engine(model, torch.optim.SGD(model.parameters(), lr=1e-3), precision=Precision("fp32", dev),
                        parallel=DataParallel(4, None, dev, comm=method),
                        loss_sum=lambda net, micro: net(micro[0], micro[1]) * micro[1].numel())
        gen = torch.Generator().manual_seed(2)
        for _ in range(steps):
            ids = torch.randint(5, 4096, (4, 32), generator=gen)
            engine.step((ids, ids.clone()), ids.numel())
        out[name] = engine.parallel.recorder.bytes_per_step(method.warmup_steps)
        w = _flat(model)
        others = [torch.empty_like(w) for _ in range(world_size)]
        dist.all_gather(others, w)
        out[name + " ranks agree"] = all(torch.equal(o, w) for o in others)
    return out
