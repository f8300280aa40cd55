"""Randomness for private algorithms: always a :class:`numpy.random.Generator`."""

from numbers import Integral

import numpy as np

__all__ = ["check_random_state", "spawn_generators"]


def check_random_state(seed):
    """Turn ``seed`` into a :class:`numpy.random.Generator`.

    Unlike :func:`sklearn.utils.check_random_state`, ``None`` never returns
    numpy's global generator (which a user's ``np.random.seed`` makes
    predictable): it draws fresh entropy from the operating system.

    Parameters
    ----------
    seed : None, int, numpy.random.Generator or numpy.random.SeedSequence
        ``None`` gives a generator seeded from OS entropy; an int or a
        ``SeedSequence`` gives a reproducible generator; a ``Generator`` is
        returned unchanged.

    Returns
    -------
    numpy.random.Generator

    Raises
    ------
    ValueError
        If ``seed`` is a legacy :class:`numpy.random.RandomState` or anything
        else. A ``RandomState`` is refused because its default global instance
        is predictable; pass ``np.random.default_rng(...)`` instead.
    """
    if seed is None:
        return np.random.default_rng()
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, (Integral, np.random.SeedSequence)) and not isinstance(seed, bool):
        return np.random.default_rng(seed)
    raise ValueError(
        f"random_state={seed!r} cannot be used to seed a numpy.random.Generator; "
        "pass None (fresh OS entropy), an int, or np.random.default_rng(...)."
    )


def spawn_generators(rng, n):
    """Return ``n`` independent child generators of ``rng``.

    Used to give every parallel block its own stream, so that results do not
    depend on ``n_jobs`` or on the joblib backend.

    Parameters
    ----------
    rng : numpy.random.Generator
    n : int

    Returns
    -------
    list of numpy.random.Generator
    """
    return rng.spawn(n)
