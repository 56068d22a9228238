"""Models of the course: NeuMF (lesson 01)."""

from .ncf import NeuMF

__all__ = ["NeuMF"]
