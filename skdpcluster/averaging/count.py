"""The noisy count of ``spec/cohen_ktuple.md`` §7.6."""

from dataclasses import replace
from numbers import Integral

from skdpcluster.averaging._common import _check_generator
from skdpcluster.mechanisms import laplace_mechanism
from skdpcluster.utils._validation import check_epsilon_delta

# ---------------------------------------------------------------------------
# Noisy count (spec §7.6)
# ---------------------------------------------------------------------------


def private_count(count, *, epsilon, rng):
    r"""Noisy count :math:`|Q| + \mathrm{Lap}(1/\varepsilon)` (``spec/cohen_ktuple.md`` §7.6).

    The reductions spend a small budget on this count and divide by
    ``max(noisy count, 1)`` in place of the exact, data-dependent size.

    **Privacy.** A count has sensitivity 1 under add/remove, so the Laplace
    mechanism is :math:`\varepsilon`-DP (Cohen et al. 2021, Theorem 2.6).

    Parameters
    ----------
    count : int
        The exact count, >= 0.
    epsilon : float
        > 0.
    rng : numpy.random.Generator

    Returns
    -------
    noisy_count : float
    event : PrivacyEvent
        ``"private_count"``, ``(epsilon, 0)``, sensitivity 1, scale 1/epsilon.
    """
    if isinstance(count, bool) or not isinstance(count, Integral) or count < 0:
        raise ValueError(f"count must be an integer >= 0, got count={count!r}.")
    epsilon, _ = check_epsilon_delta(epsilon, 0.0)
    rng = _check_generator(rng)
    noisy, event = laplace_mechanism(
        float(count), sensitivity=1.0, epsilon=epsilon, rng=rng, neighbouring="add_remove"
    )
    return noisy, replace(event, mechanism="private_count")
