"""Datasets for the course: MovieLens implicit feedback, real or synthetic (lesson 01)."""

from .movielens import (
    DATASETS,
    DatasetError,
    ImplicitData,
    cache_dir,
    describe_data_sources,
    load_implicit,
    load_synthetic,
    parse_ratings,
    verify_md5,
)
from .sampler import DeviceSampler, PerSampleDataset, make_dataloader, sample_eval_negatives

__all__ = [
    "DATASETS", "DatasetError", "ImplicitData", "cache_dir", "describe_data_sources", "load_implicit",
    "load_synthetic", "parse_ratings", "verify_md5", "DeviceSampler", "PerSampleDataset",
    "make_dataloader", "sample_eval_negatives",
]
