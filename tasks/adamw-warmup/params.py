"""Helpers to treat a list of parameter arrays as one flat vector."""

import numpy as np


def flatten(arrays):
    """Concatenate arrays into one 1-D vector; also return their shapes."""
    return np.concatenate([a.ravel() for a in arrays]), [a.shape for a in arrays]


def unflatten(vector, shapes):
    """Inverse of :func:`flatten`."""
    out, start = [], 0
    for shape in shapes:
        size = int(np.prod(shape))
        out.append(vector[start : start + size].reshape(shape))
        start += size
    return out
