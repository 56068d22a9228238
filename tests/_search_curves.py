"""Recorded-curve pools for the search tests: the tabular benchmark's mechanics and lesson 12's replay."""


def pool(n_bad=30, R=8, late_bloomer=False):
    """``n_bad`` configurations that plateau below 0.5 and two that climb to 0.9 (late bloomers: last until the end)."""
    bad = [[0.1 + (0.1 + 0.01 * i) * min(1.0, r / 2) for r in range(1, R + 1)] for i in range(n_bad)]
    if late_bloomer:
        good = [0.05 + 0.85 * (r / R) ** 3 for r in range(1, R + 1)]
    else:
        good = [0.5 + 0.4 * r / R for r in range(1, R + 1)]
    return bad + [good, list(good)]
