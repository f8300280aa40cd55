"""Run a per-row function on the rows in blocks: a row's result must not depend on its block."""

import numpy as np


def in_blocks(function, X, sizes):
    """``function`` on consecutive slices of ``X`` of the given sizes (cycled), concatenated."""
    parts, start, index = [], 0, 0
    while start < len(X):
        stop = start + sizes[index % len(sizes)]
        parts.append(function(X[start:stop]))
        start, index = stop, index + 1
    return np.concatenate(parts)
