r"""PrivateTestCloseTuples and PrivateTestPartition (Cohen et al. 2021, Section 4).

The private test that decides whether a multiset of k-tuples is (nearly)
partitioned by Delta-far balls, with the public quantities it depends on:
``m`` and ``eps1`` (Definition 4.1), ``ell`` (Definition 4.4) and the minimum
admissible number of tuples.

Two rules override the paper (``spec/cohen_ktuple.md`` §0):

* a degenerate tuple (a ball radius that is not a strictly positive finite
  float) can never pass the test (finding 1);
* the default ``accounting="corrected"`` uses the review's
  :math:`\ell_{corr}`, because Claim 4.5 is false with the printed
  :math:`\ell` (``spec/cohen_ktuple_review.md``, finding 3).

Only the Status bit leaves this module as a private release; the selected
balls are used only inside the calling algorithm (Claim 4.6).
"""

import math
from dataclasses import dataclass, field

import numpy as np

from skdpcluster.exceptions import InsufficientDataError
from skdpcluster.mechanisms import laplace_mechanism, subsampled_event
from skdpcluster.utils._errstate import quiet_floating_point
from skdpcluster.utils._validation import check_epsilon_delta, check_probability

__all__ = [
    "ACCOUNTING_MODES",
    "PartitionTestResult",
    "ball_radii",
    "compute_m_eps1",
    "count_not_partitioned",
    "ell",
    "min_tuples",
    "private_test_close_tuples",
    "private_test_partition",
]

ACCOUNTING_MODES = ("corrected", "paper")

# Target epsilon of the T1 part up to which Lemma 2.10 (BKN10) is proven.
_BKN10_MAX_EPSILON = 1.0
# Largest target that Definition 4.1's eps1 is solved for. The eps1 of a target t prices at
# (m/n)(3 + e^eps1) = t (1 + r): eps1 = log(t n/m - 3) and its re-pricing round by
# |r| <= (eps1 + 10) 2^-53 < 1e-14 (eps1 <= log n < 44). Solving for t <= 1 - 1e-12 keeps the
# price, exact or computed, below the validity bound 1 of Lemma 2.10; at an epsilon/2 within
# 1e-12 of 1, solving for 1 itself rounded above it and the re-pricing raised after the test.
_BKN10_MAX_TARGET = _BKN10_MAX_EPSILON - 1e-12
# Memory budget of one chunk of the partition test (float64 entries).
_CHUNK_ENTRIES = 4_000_000


def _check_accounting(accounting):
    if accounting not in ACCOUNTING_MODES:
        raise ValueError(f"accounting must be one of {ACCOUNTING_MODES}, got accounting={accounting!r}.")


def _eps1_for(m, n, epsilon):
    """eps1 that makes the T1 part (epsilon/2)-DP by subsampling m of n tuples.

    Definition 4.1 (from Lemma 2.10) when epsilon/2 <= 1:
    ``eps1 = log(epsilon n / (2m) - 3)``, with epsilon/2 capped at
    ``1 - 1e-12`` so that rounding cannot price the T1 part above the
    lemma's validity bound 1 (``_BKN10_MAX_TARGET``). Above that Lemma 2.10
    is not proven, and the bound of Balle, Barthe & Gaboardi (2018, Theorem 10)
    gives ``eps1 = log(1 + (n/m)(e^{epsilon/2} - 1))``. Returns -inf when
    infeasible.
    """
    if epsilon / 2 <= _BKN10_MAX_EPSILON:
        argument = min(epsilon / 2, _BKN10_MAX_TARGET) * n / m - 3
        return math.log(argument) if argument > 1 else -math.inf
    return _log_one_plus_rate_expm1(epsilon / 2, n / m)


def _log_one_plus_rate_expm1(x, rate):
    """``log(1 + rate (e^x - 1))`` without overflow, for x >= 0 and rate >= 0."""
    if rate <= 1:
        return float(np.logaddexp(math.log(rate) + x, math.log1p(-rate))) if rate < 1 else x
    # rate > 1: 1 + rate (e^x - 1) = rate e^x (1 - (1 - 1/rate) e^{-x})
    return x + math.log(rate) + math.log1p(-(1 - 1 / rate) * math.exp(-x))


def compute_m_eps1(n, epsilon, delta, beta):
    r"""Definition 4.1: the smallest m with :math:`m\,\varepsilon_1 > 2\log(1/\delta) + \log(1/\beta)`.

    Parameters
    ----------
    n : int
        Number of tuples.
    epsilon, delta, beta : float
        The parameters *passed to PrivateTestPartition* (inside the main
        algorithms these are ``eps/2, delta/4, beta/2`` of the outer call).

    Returns
    -------
    m : int
    eps1 : float
        ``log(epsilon n / (2m) - 3)`` (or the Balle et al. equivalent when
        ``epsilon > 2``, see :func:`_eps1_for`).

    Raises
    ------
    InsufficientDataError
        If no m is feasible (too few tuples for these parameters).
    """
    epsilon, delta = check_epsilon_delta(epsilon, delta, allow_zero_delta=False)
    beta = check_probability(beta, "beta", closed_right=True)
    threshold = 2 * math.log(1 / delta) + math.log(1 / beta)
    for m in range(1, int(n) + 1):
        eps1 = _eps1_for(m, n, epsilon)
        if eps1 == -math.inf:
            break  # larger m only lowers the argument of the log (spec §4.2)
        if m * eps1 > threshold:
            return m, eps1
    raise InsufficientDataError(
        f"no admissible m for n={n} tuples at (epsilon={epsilon}, delta={delta}, beta={beta}) "
        "in Definition 4.1; more tuples are needed."
    )


def ell(n, epsilon, delta, beta, accounting="corrected"):
    r"""Number of tuples that may be left unpartitioned after a successful test.

    At PrivateTestPartition's own parameters, with
    :math:`\varepsilon_2 = \varepsilon/2` and ``(m, eps1) = compute_m_eps1(...)``:

    * ``"paper"`` (Definition 4.4): :math:`\ell = (m/\varepsilon_2)\log(m/(\beta\delta))`;
    * ``"corrected"`` (review, finding 3):
      :math:`\ell = (m/\varepsilon_2)\log\big((m/\beta)(m e^{\varepsilon_1}/\delta + 1/2)\big)`,
      the value for which Claim 4.5 is actually proven.

    Returns
    -------
    float
        The real value (not floored), as the paper uses it.
    """
    _check_accounting(accounting)
    m, eps1 = compute_m_eps1(n, epsilon, delta, beta)
    scale = 2 * m / epsilon
    if accounting == "paper":
        return scale * math.log(m / (beta * delta))
    # log((m/beta)(m e^eps1 / delta + 1/2)), in log space: eps1 grows like epsilon/4.
    return scale * (math.log(m / beta) + float(np.logaddexp(math.log(m / delta) + eps1, -math.log(2))))


def _outer_ell(n, epsilon, delta, beta, accounting):
    """``ell(n, eps/2, delta/4, beta/2)``: the substitution of Claim 4.6."""
    return ell(n, epsilon / 2, delta / 4, beta / 2, accounting)


def _is_admissible(n, epsilon, delta, beta, accounting):
    try:
        return n >= 2 * _outer_ell(n, epsilon, delta, beta, accounting) + 2
    except InsufficientDataError:
        return False


def min_tuples(epsilon, delta, beta, accounting="corrected"):
    r"""Smallest number of tuples n with :math:`n \ge 2\,\ell(n, \varepsilon/2, \delta/4, \beta/2) + 2`.

    The requirement of Theorems 4.9 and 4.12 (Cohen et al. 2021) for the
    outer privacy parameters. :math:`\ell(n)` does not increase with n, so
    the admissible set is upward closed and bisection finds its minimum.

    Examples
    --------
    >>> import math
    >>> min_tuples(1.0, math.exp(-28), 0.05)
    5019
    >>> min_tuples(1.0, math.exp(-28), 0.05, accounting="paper")
    4296
    """
    epsilon, delta = check_epsilon_delta(epsilon, delta, allow_zero_delta=False)
    beta = check_probability(beta, "beta")
    _check_accounting(accounting)
    low, high = 0, 1  # invariant: low is inadmissible (or 0), high is the next probe
    while not _is_admissible(high, epsilon, delta, beta, accounting):
        low, high = high, 2 * high
        if high > 2**62:
            raise ValueError("no admissible number of tuples below 2**62; check the parameters.")
    while high - low > 1:
        middle = (low + high) // 2
        if _is_admissible(middle, epsilon, delta, beta, accounting):
            high = middle
        else:
            low = middle
    return high


# ---------------------------------------------------------------------------
# PrivateTestCloseTuples (Figure 1)
# ---------------------------------------------------------------------------


def ball_radii(tuples, separation):
    r"""Radii :math:`r_i^X = \min_{j \ne i}\|x_i - x_j\| / \Delta` of every tuple (step 1a).

    Parameters
    ----------
    tuples : ndarray of shape (n_tuples, k, d)
    separation : float
        Delta.

    Returns
    -------
    ndarray of shape (n_tuples, k)
    """
    gaps = np.linalg.norm(tuples[:, :, None, :] - tuples[:, None, :, :], axis=-1)
    k = tuples.shape[1]
    gaps[:, np.arange(k), np.arange(k)] = np.inf
    return gaps.min(axis=2) / separation


def _is_degenerate(radii):
    """Finding 1: a tuple whose radii are not all strictly positive finite floats."""
    return ~np.all(np.isfinite(radii) & (radii > 0), axis=-1)


def count_not_partitioned(centers, radii, tuples):
    r"""Number of tuples in ``tuples`` not partitioned by the balls ``B(centers_i, radii_i)`` (step 1b).

    A tuple Y is partitioned when every ball holds exactly one of its points,
    counting multiplicity (Definition 3.2); closed balls, unsquared
    distances (spec §3.3). Chunked so that memory stays bounded.

    Parameters
    ----------
    centers : ndarray of shape (k, d)
    radii : ndarray of shape (k,)
    tuples : ndarray of shape (n_tuples, k, d)

    Returns
    -------
    int
    """
    n, k, d = tuples.shape
    chunk = max(1, _CHUNK_ENTRIES // (k * k * max(d, 1)))
    bad = 0
    for start in range(0, n, chunk):
        block = tuples[start : start + chunk]
        distances = np.linalg.norm(block[:, :, None, :] - centers[None, None, :, :], axis=-1)
        per_ball = (distances <= radii[None, None, :]).sum(axis=1)  # (chunk, k): points of Y in ball i
        bad += int(np.count_nonzero(np.any(per_ball != 1, axis=1)))
    return bad


@dataclass
class PartitionTestResult:
    """Outcome of the private partition test.

    Only ``success`` is a private release. ``centers`` and ``radii`` (the balls
    of the selected tuple) are not private and must only be used inside the
    calling algorithm (Claim 4.6); they are ``None`` on failure.
    """

    success: bool
    centers: np.ndarray | None
    radii: np.ndarray | None
    m: int
    eps1: float
    events: list = field(default_factory=list)


def _unpartitioned_counts(t1, radii, degenerate, t2):
    r""":math:`\ell_X` for every X in T1 (Figure 1, step 1b); a degenerate X counts all of T2."""
    return np.array([
        count_not_partitioned(t1[i], radii[i], t2) if not degenerate[i] else t2.shape[0]
        for i in range(t1.shape[0])
    ])


def _unpartitioned_counts_sensitivity(m):
    """L1 sensitivity m of the m counts: one T2 tuple moves every count by at most 1."""
    return float(m)


def _noisy_unpartitioned_counts(counts, eps2, rng):
    r"""Figure 1, step 1c: :math:`\hat\ell_X = \ell_X + \mathrm{Lap}(m/\varepsilon_2)`.

    :math:`\varepsilon_2`-DP. ``counts`` has the m counts on its last axis (leading axes:
    independent releases).
    """
    m = np.shape(counts)[-1]
    return laplace_mechanism(counts, sensitivity=_unpartitioned_counts_sensitivity(m),
                             epsilon=eps2, rng=rng, label="partition_test/unpartitioned_counts")


def _passing_tuples(noisy_counts, eps2, beta, degenerate):
    """pass_X: the noisy count is at most (m / eps2) log(m / beta) and X is not degenerate."""
    m = degenerate.shape[0]
    return (np.atleast_1d(noisy_counts) <= (m / eps2) * math.log(m / beta)) & ~degenerate


def _passing_count_sensitivity():
    """Sensitivity 1 of the number of passing tuples: one T1 tuple changes one pass bit."""
    return 1.0


def _noisy_passing_count(n_passing, eps1, rng):
    r"""Figure 1, step 2: :math:`\hat s = \sum_X pass_X + \mathrm{Lap}(1/\varepsilon_1)`.

    :math:`\varepsilon_1`-DP before the amplification by subsampling of
    :func:`private_test_partition`.
    """
    return laplace_mechanism(n_passing, sensitivity=_passing_count_sensitivity(), epsilon=eps1,
                             rng=rng, label="partition_test/passing_count")


def private_test_close_tuples(t1, t2, *, eps1, eps2, beta, separation, rng):
    r"""PrivateTestCloseTuples (Cohen et al. 2021, Figure 1).

    For each X in T1: the balls :math:`B(x_i, r_i^X)`, the count
    :math:`\ell_X` of tuples of T2 they do not partition, released as
    :math:`\hat\ell_X = \ell_X + \mathrm{Lap}(m/\varepsilon_2)`;
    :math:`pass_X = 1` iff :math:`\hat\ell_X \le (m/\varepsilon_2)\log(m/\beta)`
    and X is not degenerate. Then :math:`\hat s = \sum pass_X + \mathrm{Lap}(1/\varepsilon_1)`
    and Status is Success iff :math:`\hat s \ge m - \log(1/\beta)/\varepsilon_1`.
    On success the balls of the first passing X are returned; success with
    no passing tuple is reported as failure (spec §3.4 item 3).

    Parameters
    ----------
    t1 : ndarray of shape (m, k, d)
        Ordered; "first" means first in this order.
    t2 : ndarray of shape (n, k, d)
    eps1, eps2 : float
        Budgets of the T1 part and of the T2 part.
    beta : float
    separation : float
        Delta > 6.
    rng : numpy.random.Generator

    Returns
    -------
    PartitionTestResult
        Its events price the T2 part (``eps2``) and the T1 part (``eps1``,
        before any subsampling amplification).
    """
    m = t1.shape[0]
    radii = ball_radii(t1, separation)
    degenerate = _is_degenerate(radii)
    counts = _unpartitioned_counts(t1, radii, degenerate, t2)
    noisy_counts, count_event = _noisy_unpartitioned_counts(counts, eps2, rng)
    passes = _passing_tuples(noisy_counts, eps2, beta, degenerate)
    noisy_sum, sum_event = _noisy_passing_count(float(passes.sum()), eps1, rng)
    success = noisy_sum >= m - math.log(1 / beta) / eps1 and bool(passes.any())
    chosen = int(np.argmax(passes)) if success else None
    # The tuple is an unordered set: hand it on in canonical row order, so that nothing
    # downstream can depend on the order of its points (spec §0, finding 2).
    order = None if chosen is None else np.lexsort(t1[chosen].T[::-1])
    return PartitionTestResult(
        success=success,
        centers=None if chosen is None else t1[chosen][order],
        radii=None if chosen is None else radii[chosen][order],
        m=m,
        eps1=eps1,
        events=[count_event, sum_event],
    )


@quiet_floating_point
def private_test_partition(tuples, *, epsilon, delta, beta, separation, rng):
    r"""PrivateTestPartition (Cohen et al. 2021, Figure 2).

    ``(m, eps1)`` from Definition 4.1, T1 a uniform sample of m tuples
    without replacement in random order, T2 = T, and
    :math:`\varepsilon_2 = \varepsilon/2`. Status is
    :math:`\varepsilon`-DP (Claim 4.3): :math:`\varepsilon/2` from the
    subsampled T1 part and :math:`\varepsilon/2` from the T2 part.

    Parameters
    ----------
    tuples : ndarray of shape (n, k, d)
    epsilon, delta, beta : float
        This call's own parameters (the outer algorithms pass
        ``eps/2, delta/4, beta/2``).
    separation : float
        Delta > 6.
    rng : numpy.random.Generator

    Returns
    -------
    PartitionTestResult
    """
    n = tuples.shape[0]
    m, eps1 = compute_m_eps1(n, epsilon, delta, beta)
    order = rng.choice(n, size=m, replace=False)
    result = private_test_close_tuples(
        tuples[order], tuples, eps1=eps1, eps2=epsilon / 2, beta=beta, separation=separation, rng=rng
    )
    # The T1 part ran on a subsample: re-price it with the bound Definition 4.1 was built on.
    bound = "bkn10" if epsilon / 2 <= _BKN10_MAX_EPSILON else "balle2018"
    result.events[1] = subsampled_event(result.events[1], m, n, bound=bound)
    return result
