"""What the launcher's fork server imports once, so that no worker imports it again (``dist.launch``).

torch (2-3 s of CPU), torch.distributed, the optimizers, and torch._dynamo, which the optimizers
import at their first step (another 1.7 s). torch._dynamo makes inductor's cache folder at import,
``$TMPDIR/torchinductor_<user>`` unless ``TORCHINDUCTOR_CACHE_DIR`` says where: the server makes it
in a private folder of its own and removes that at once (nothing in the server compiles), so the
server leaves nothing behind however the launcher ends. A worker that compiles later makes its
cache where torch would have, in its own temp dir (the launch's run folder).
"""

import atexit
import os
import shutil
import tempfile

import torch  # noqa: F401
import torch.distributed  # noqa: F401
import torch.optim  # noqa: F401

if "TORCHINDUCTOR_CACHE_DIR" in os.environ:  # the user's choice: theirs to keep
    import torch._dynamo  # noqa: F401
else:
    _scratch = tempfile.mkdtemp(prefix="course-forkserver-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = _scratch
    try:
        import torch._dynamo  # noqa: F401
    finally:
        os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)  # torch._dynamo set it for itself; workers decide anew
        shutil.rmtree(_scratch, ignore_errors=True)


_SERVER_PID = os.getpid()

# A process group of its own. Jupyter ends a kernel by killing the kernel's whole process group
# (jupyter_client, at the end of a shutdown); in that group the server died with it, before its exit
# handler below could run, and every kernel that had launched left its pymp-* folder in the temp
# dir (one per lesson of `make course`). Out of the group, the server sees its
# launcher go (EOF on the 'alive' pipe), exits, and removes it. The workers make groups of their
# own anyway (dist.launcher._worker_main), and the server ignores Ctrl-C in either group.
try:
    os.setpgid(0, 0)
except OSError:
    pass


def _remove_socket_folder() -> None:
    """At the server's exit, remove the launcher's multiprocessing folder that holds its socket.

    The server exits when its launcher is gone (EOF on the 'alive' pipe). The launcher removes that
    folder itself at exit, but not when a burst of Ctrl-C interrupts its exit handlers (seen in
    tests/test_dist.py) or a SIGKILL skips them. Forked workers never run this: they leave with
    os._exit, and the pid check makes sure."""
    if os.getpid() != _SERVER_PID:
        return
    from multiprocessing import forkserver

    address = getattr(forkserver._forkserver, "_forkserver_address", None)
    if isinstance(address, str):
        folder = os.path.dirname(address)
        if os.path.basename(folder).startswith("pymp-"):
            shutil.rmtree(folder, ignore_errors=True)


atexit.register(_remove_socket_folder)
