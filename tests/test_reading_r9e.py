"""Readings fixed after the ninth full run's read-only pass over lesson 12 (#37, r9e)."""

from test_reading_agreement import disagreements
from test_reading_r8d import _parallel_table

from course_lib.lessons import l12_hyperparameter_search as L12


def test_the_parallel_reading_says_the_other_processes_drew_configurations_of_their_own():
    """r9e 12-C1: "Epochs to the target: 2.5 against 2: in parallel the trials finished in another order" called the
    parallel search the same one, while search_worker seeds process r with seed + r: 4 of its 8 trials were
    configurations the one process never drew. Opposite: with the same epochs to target nothing is explained."""
    t = _parallel_table((1, 11.0, 11.0, 7, "7", 16.5, 0.659, 2.0), (2, 9.5, 12.7, 9, "5, 4", 20.5, 0.656, 2.5))
    said = L12.parallel_reading(t)
    assert "Epochs to the target: 2.5 against 2: the other processes drew configurations of their own" in said, said
    assert "(process r with seed + r)" in said
    assert disagreements(said, t) == [], said

    level = _parallel_table((1, 11.0, 11.0, 7, "7", 16.5, 0.659, 2.0), (2, 9.5, 12.7, 9, "5, 4", 20.5, 0.656, 2.0))
    assert "configurations of their own" not in L12.parallel_reading(level)
