"""Fixtures shared by the training-loop tests."""

import os

import pytest
import torch

from course_lib.data import load_synthetic


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """The tiny synthetic MovieLens set, built in a private cache, with one intra-op thread.

    One thread: these steps are tiny, and on a busy machine two spinning OpenMP threads per
    process made them up to 50x slower (measured on a shared 2-core box).
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    old = os.environ.get("COURSE_DATA_DIR")
    os.environ["COURSE_DATA_DIR"] = str(tmp_path_factory.mktemp("cache"))
    try:
        yield load_synthetic("tiny")
    finally:
        torch.set_num_threads(threads)
        if old is None:
            os.environ.pop("COURSE_DATA_DIR")
        else:
            os.environ["COURSE_DATA_DIR"] = old
