"""What the launcher's fork server imports once, so that no worker imports it again (``dist.launch``).

torch (2-3 s of CPU), torch.distributed, the optimizers, and torch._dynamo, which the optimizers
import at their first step (another 1.7 s). torch._dynamo makes inductor's cache folder at import,
``$TMPDIR/torchinductor_<user>`` unless ``TORCHINDUCTOR_CACHE_DIR`` says where: the server makes it
in a private folder of its own and removes that at once (nothing in the server compiles), so the
server leaves nothing behind however the launcher ends. A worker that compiles later makes its
cache where torch would have, in its own temp dir (the launch's run folder).
"""

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
