"""Worker functions for the launcher tests. They live in a module (not a test body)
because spawned workers import functions by module and name."""

import os
import signal
import time

import torch
import torch.distributed as dist

from course_lib import dist as cdist

from _timing import scaled


def echo(rank, world_size, payload):
    print(f"hello from rank {rank}")
    return {"rank": rank, "world_size": world_size, "payload": payload,
            "port": os.environ["MASTER_PORT"], "addr": os.environ["MASTER_ADDR"],
            "helpers": (cdist.rank(), cdist.world_size(), cdist.is_main_process()),
            "backend": dist.get_backend(),
            "stdout_file": os.readlink("/proc/self/fd/1") if os.path.exists("/proc/self/fd/1") else None}


def big_result(rank, world_size, n):
    # ~4*n bytes per rank; the values encode the rank so a mix-up is visible.
    return {"tensor": torch.arange(n, dtype=torch.float32) + rank, "nested": [rank, {"x": torch.ones(3) * rank}]}


def _write_pid(pid_dir, rank):
    path = os.path.join(pid_dir, f"{rank}.pid")
    with open(path + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(path + ".tmp", path)


def fail_on(rank, world_size, bad_rank, pid_dir):
    _write_pid(pid_dir, rank)
    dist.barrier()  # both pid files exist before anything fails, however slowly each rank started
    if rank == bad_rank:
        time.sleep(0.5)
        raise ValueError(f"boom from rank {rank}")
    dist.barrier()  # the healthy rank waits in a collective the failing rank never joins
    return rank


def killed_by_signal(rank, world_size, bad_rank, pid_dir):
    """Rank ``bad_rank`` SIGKILLs itself (as the OOM killer would); the others wait in a collective."""
    _write_pid(pid_dir, rank)
    dist.barrier()
    if rank == bad_rank:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()
    return rank


def hang_in_collective(rank, world_size, pid_dir):
    """Rank 0 blocks in a barrier; the others sleep forever and never join it."""
    _write_pid(pid_dir, rank)
    if rank == 0:
        dist.barrier()
    else:
        while True:
            time.sleep(1)


def ncf_runs_with_specs(rank, world_size, runs):
    """Several ``ncf_worker`` runs, each with its own ``RunSpec``, in one launch (launches cost seconds)."""
    from course_lib.train.workers import ncf_worker

    return [ncf_worker(rank, world_size, cfg, spec) for cfg, spec in runs]


def mlm_data_differs(rank, world_size):
    """Each rank builds MLM data from a different text: the check must stop every rank."""
    from course_lib.data.text import Corpus, build_mlm_data, pydoc_corpus
    from course_lib.train.workers import check_same_data_on_all_ranks

    docs = pydoc_corpus().documents[rank * 5:rank * 5 + 5]
    data = build_mlm_data(Corpus(f"rank{rank}", "test", tuple(docs)), vocab_size=200, seq_len=16, max_tokens=2000)
    check_same_data_on_all_ranks(data)
    return "trained on mismatched data"


def _wait_for_file(path, timeout_s):
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout_s} s")
        time.sleep(0.05)


def hold_sockets_open(rank, world_size, pid_dir, release_path, wait_s=None):
    """All-reduce once (so gloo's pairs are connected), report the pid, then wait for the test
    to look at every socket of the process tree and create ``release_path``."""
    t = torch.ones(4) * rank
    dist.all_reduce(t)
    _write_pid(pid_dir, rank)
    _wait_for_file(release_path, scaled(600) if wait_s is None else wait_s)
    return float(t.sum())


def tree_sockets(root_pid=None):
    """Every inet socket (TCP and UDP, v4 and v6, any state) of a process and its descendants."""
    import psutil

    root = psutil.Process(root_pid or os.getpid())
    found = []
    for proc in [root, *root.children(recursive=True)]:
        try:
            conns = proc.net_connections(kind="inet")
            name = proc.name()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        for c in conns:
            found.append({"pid": proc.pid, "name": name, "status": c.status,
                          "laddr": tuple(c.laddr) if c.laddr else (), "raddr": tuple(c.raddr) if c.raddr else ()})
    return found


def non_loopback(sockets):
    """The sockets bound to, or connected to, an address that is not loopback."""
    import ipaddress

    def off_host(addr):
        if not addr:
            return False
        ip = ipaddress.ip_address(addr[0].split("%")[0])
        ip = getattr(ip, "ipv4_mapped", None) or ip  # TCPStore's client connects from ::ffff:127.0.0.1
        return not ip.is_loopback

    return [s for s in sockets if off_host(s["laddr"]) or off_host(s["raddr"])]


def launch_and_scan_sockets(pid_dir, world_size=2):
    """Launch ``hold_sockets_open`` and, while every rank holds its sockets, list every socket
    of this process's tree. Returns (results, sockets, error of the scanning thread or None)."""
    import threading

    from course_lib import dist as cdist

    release = os.path.join(pid_dir, "release")
    seen = {}

    def scan():
        try:
            _wait_for_pid_files(pid_dir, world_size, timeout_s=scaled(300))
            seen["sockets"] = tree_sockets()
        except BaseException as exc:  # noqa: BLE001 - reported to the test, never swallowed
            seen["error"] = exc
        finally:
            open(release, "w").close()

    thread = threading.Thread(target=scan, daemon=True)
    thread.start()
    results = cdist.launch(hold_sockets_open, world_size, pid_dir, release, timeout_s=scaled(600), quiet=True)
    thread.join(timeout=scaled(60))
    return results, seen.get("sockets", []), seen.get("error")


def _wait_for_pid_files(pid_dir, n, timeout_s):
    import glob

    deadline = time.monotonic() + timeout_s
    while len(glob.glob(os.path.join(pid_dir, "*.pid"))) < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the workers did not write {n} pid files in {pid_dir} within {timeout_s} s")
        time.sleep(0.05)


def result_only_the_worker_can_rebuild(rank, world_size, bad_rank):
    """Rank ``bad_rank`` returns an object of a class that only exists in the worker: it pickles
    there, and cannot be rebuilt in the launching process."""
    import sys
    import types

    if rank != bad_rank:
        return rank
    module = types.ModuleType("course_test_only_in_worker")
    exec("class Opaque:\n    pass\n", module.__dict__)
    sys.modules[module.__name__] = module
    return {"rank": rank, "value": module.Opaque()}


class _Range(torch.utils.data.Dataset):
    def __len__(self):
        return 1000

    def __getitem__(self, i):
        return torch.full((4,), float(i))


def children_then_hang(rank, world_size, pid_dir):
    """Start a plain subprocess and a DataLoader worker, report every descendant's pid in
    ``desc<rank>.txt`` (the workers' pid files come last), then hang like ``hang_in_collective``."""
    import subprocess
    import sys

    import psutil

    child = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(1)"])
    loader = torch.utils.data.DataLoader(_Range(), batch_size=2, num_workers=1, persistent_workers=True)
    batches = iter(loader)
    next(batches)  # the DataLoader worker is up and has sent a batch (through shared memory)
    descendants = [p.pid for p in psutil.Process().children(recursive=True)]
    assert child.pid in descendants and len(descendants) >= 2, descendants
    with open(os.path.join(pid_dir, f"desc{rank}.txt.tmp"), "w") as f:
        f.write("\n".join(map(str, descendants)))
    os.replace(os.path.join(pid_dir, f"desc{rank}.txt.tmp"), os.path.join(pid_dir, f"desc{rank}.txt"))
    hang_in_collective(rank, world_size, pid_dir)
    return batches  # never reached; keeps the loader alive


def children_then_hang_with_only(rank, world_size, pid_dir, keep):
    """``children_then_hang`` with the worker's own orphan defences switched off, except ``keep``:
    "pdeathsig" (the kernel's parent-death signal), "parent-watch" (the thread that exits when
    the parent pid changes), or anything else for neither. Lets a test show that each defence
    works alone, rather than only that together they do."""
    import ctypes

    if keep != "pdeathsig":
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, 0)  # PR_SET_PDEATHSIG = 0: no signal
    if keep != "parent-watch":
        parent = os.getppid()
        os.getppid = lambda: parent  # the watch thread sees the launcher alive forever
    children_then_hang(rank, world_size, pid_dir)


def collectives_and_parameter_server(rank, world_size, lengths, dtypes, segments, groups, configs, problem):
    """Lesson 08's two multi-process checks in one launch (a launch costs seconds of start-up)."""
    from course_lib.comm.collectives import compare_with_backend
    from course_lib.parallel.staleness import parameter_server_worker

    return {"compare": compare_with_backend(rank, world_size, lengths, dtypes, segments, groups),
            "server": parameter_server_worker(rank, world_size, configs, problem)}


def allreduce_batchnorm_unequal_shards(rank, world_size, sizes, seed=0):
    """AllReduceBatchNorm on shards of different sizes (``sizes[r]`` rows on rank r) against one
    process's BatchNorm1d on the whole batch: outputs, input gradients, parameter gradients
    (summed over ranks) and running statistics. Returns the largest absolute differences."""
    from torch import nn

    from course_lib.parallel.sync_batchnorm import AllReduceBatchNorm

    g = torch.Generator().manual_seed(seed)
    n, c = sum(sizes), 6
    x = torch.randn(n, c, generator=g) * torch.linspace(0.5, 3, c) + torch.linspace(-2, 2, c)
    upstream = torch.randn(n, c, generator=g)  # d(loss)/d(output) of a loss summed over rows
    ref = nn.BatchNorm1d(c)
    with torch.no_grad():
        ref.weight.copy_(torch.rand(c, generator=g) + 0.5)
        ref.bias.copy_(torch.randn(c, generator=g))
    bn = AllReduceBatchNorm(c)
    bn.load_state_dict(ref.state_dict())
    start = sum(sizes[:rank])
    rows = slice(start, start + sizes[rank])

    mine = x[rows].clone().requires_grad_()
    y = bn(mine)
    (y * upstream[rows]).sum().backward()
    whole = x.clone().requires_grad_()
    y_ref = ref(whole)
    (y_ref * upstream).sum().backward()
    for p in (bn.weight, bn.bias):
        dist.all_reduce(p.grad)  # each rank holds its rows' share; DDP would sum (then average) them

    def diff(a, b):
        return float((a - b).abs().max())

    return {
        "output": diff(y.detach(), y_ref[rows].detach()),
        "input_grad": diff(mine.grad, whole.grad[rows]),
        "weight_grad": diff(bn.weight.grad, ref.weight.grad),
        "bias_grad": diff(bn.bias.grad, ref.bias.grad),
        "running_mean": diff(bn.running_mean, ref.running_mean),
        "running_var": diff(bn.running_var, ref.running_var),
    }


# --------------------------------------------------------------------------- lesson 10


def lesson10_four_ranks(rank, world_size):
    """Everything lesson 10 checks on 4 ranks in one launch: tensor parallel with sizes that do not
    divide (30 features, 6 heads: 2, 2, 1, 1), a 4-stage pipeline (middle stages) of the MLP stack and of
    a 4-block BERT (and the BERT without adding up its tied embedding's gradient), halo strips with two
    neighbours, and the 2 x 2 mesh."""
    from course_lib.parallel import hybrid, pipeline, spatial, tensor

    spec = {"width": 16, "depth": 4, "batch": 8, "ms": [1, 4], "schedules": ["GPipe", "1F1B"], "repeats": 1,
            "native": True}
    bert = {"preset": "tiny", "vocab_size": 128, "seq_len": 8, "batch": 4, "ms": [1, 4], "schedules": ["1F1B"],
            "num_layers": 4}
    return {"tensor": tensor.compare_with_full(rank, world_size, hidden=12, heads=6, intermediate=30),
            "pipeline": pipeline.pipeline_worker(rank, world_size, spec),
            # the synchronous pipeline at 3 stages on the first three ranks, and at 4
            "deep": pipeline.pipeline_depths_worker(rank, world_size, {**spec, "depth": 12, "ps": [3, 4]}),
            "bert_pipeline": pipeline.bert_pipeline_worker(rank, world_size, bert),
            "bert_untied": pipeline.bert_pipeline_worker(rank, world_size, {**bert, "ms": [4], "tied": False}),
            "halo": spatial.compare_halo_conv(rank, world_size, height=11, kernel=3, layers=2),
            "mesh": hybrid.mesh_worker(rank, world_size, dp=2)}


class GoodCopyToParallel(torch.autograd.Function):
    """Exercise 10's answer."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous().clone()
        dist.all_reduce(grad)
        return grad


class NoAllReduce(GoodCopyToParallel):
    """Identity both ways: dL/dx stays a partial sum."""

    @staticmethod
    def backward(ctx, grad):
        return grad


class AllReduceForward(GoodCopyToParallel):
    """The all-reduce on the wrong side (Megatron's g instead of f)."""

    @staticmethod
    def forward(ctx, x):
        return GoodCopyToParallel.backward(ctx, x)

    @staticmethod
    def backward(ctx, grad):
        return grad


class AveragedBackward(GoodCopyToParallel):
    """Data parallelism's habit: the mean over ranks instead of the sum."""

    @staticmethod
    def backward(ctx, grad):
        return GoodCopyToParallel.backward(ctx, grad) / dist.get_world_size()


def env_value(rank, world_size, name):
    """The worker's value of the environment variable ``name`` (None when unset)."""
    return os.environ.get(name)


def hook_runs(rank, world_size, steps):
    """The same 2-layer model trained ``steps`` SGD steps under DDP with each comm hook variant
    (tests/test_ddp_hooks.py): final parameters, bytes the recorder counted, DDP's refusals."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    from course_lib.comm import hooks

    gen = torch.Generator().manual_seed(rank)
    X, y = torch.randn(32, 512, generator=gen), torch.randn(32, 3, generator=gen)

    def build():  # 2 MiB of gradients: more than the 1 MiB DDP puts in its first bucket
        return torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                   torch.nn.ReLU(), torch.nn.Linear(512, 3))

    def train(register):
        torch.manual_seed(0)
        model = DDP(build(), bucket_cap_mb=0.5)
        register(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(steps):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(X), y).backward()
            opt.step()
        return torch.cat([p.detach().reshape(-1) for p in model.parameters()])

    out = {"num_params": sum(p.numel() for p in build().parameters())}
    out["no hook"] = train(lambda m: None)
    out["torch allreduce_hook"] = train(lambda m: m.register_comm_hook(None, default_hooks.allreduce_hook))
    out["torch fp16_compress_hook"] = train(lambda m: m.register_comm_hook(None, default_hooks.fp16_compress_hook))
    for c in hooks.COMPRESSIONS:
        rec = hooks.AllReduceRecorder(c, count_underflow=True)
        out[f"recorder {c}"] = train(lambda m: m.register_comm_hook(None, rec.hook))
        out[f"recorder {c} bytes"] = rec.bytes_sent()
        out[f"recorder {c} dtypes"] = sorted({r["dtype"] for r in rec.records})
        out[f"recorder {c} calls"] = rec.calls
        out[f"recorder {c} in flight"] = rec.in_flight_s()
        out[f"recorder {c} underflow"] = dict(rec.underflow)
        out[f"refusal {c}"] = hooks.ddp_refusal(c)
        if c != "none":
            out[f"gloo reduces {c}"] = hooks.backend_reduces(hooks.COMPRESSED_DTYPES[c])
    return out
