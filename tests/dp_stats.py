"""Statistical privacy checks: lower confidence bounds on the privacy loss.

For two output samples (from neighbouring inputs) and a family of events, the
functions below return a value that, with probability at least 1 - alpha, is
*below* the true privacy loss of the mechanism on those inputs. A test then
asserts that this lower bound does not exceed the claimed epsilon (or delta);
the same test applied to a deliberately under-noised mechanism must report a
violation, which shows the check can fail. Clopper-Pearson intervals with a
Bonferroni correction over the events give the confidence level.

For a Gaussian mechanism calibrated at a small delta, no feasible sample
reaches the tail events where (epsilon, delta) is tight; its claim is made
through the ratio mu = sensitivity / sigma (Gaussian differential privacy,
Dong, Roth & Su 2022; the analytic calibration of Balle & Wang 2018 is exact
for it), which :func:`mu_lower_bound` tests with events of moderate
probability.
"""

import numpy as np
from scipy import stats


def _cp_lower(k, n, alpha):
    return np.where(k > 0, stats.beta.ppf(alpha, np.maximum(k, 1), n - k + 1), 0.0)


def _cp_upper(k, n, alpha):
    return np.where(k < n, stats.beta.ppf(1 - alpha, k + 1, np.maximum(n - k, 1)), 1.0)


def event_counts(samples, edges):
    """Counts of the half-line events {x > t} and {x <= t} for every threshold t."""
    samples = np.sort(np.asarray(samples))
    above = samples.size - np.searchsorted(samples, edges, side="right")
    return np.concatenate([above, samples.size - above])


def epsilon_lower_bound(counts_a, n_a, counts_b, n_b, *, delta=0.0, alpha=1e-6):
    """Lower confidence bound on max_E log((P_a(E) - delta) / P_b(E)), both directions."""
    counts_a, counts_b = np.asarray(counts_a), np.asarray(counts_b)
    level = alpha / (4 * counts_a.size)
    best = -np.inf
    for (ka, na), (kb, nb) in (((counts_a, n_a), (counts_b, n_b)), ((counts_b, n_b), (counts_a, n_a))):
        numerator = _cp_lower(ka, na, level) - delta
        denominator = _cp_upper(kb, nb, level)
        ok = numerator > 0
        if np.any(ok):
            best = max(best, float(np.max(np.log(numerator[ok] / denominator[ok]))))
    return best


def delta_lower_bound(counts_a, n_a, counts_b, n_b, *, epsilon, alpha=1e-6):
    """Lower confidence bound on max_E P_a(E) - e^epsilon P_b(E), both directions."""
    counts_a, counts_b = np.asarray(counts_a), np.asarray(counts_b)
    level = alpha / (4 * counts_a.size)
    gaps = []
    for (ka, na), (kb, nb) in (((counts_a, n_a), (counts_b, n_b)), ((counts_b, n_b), (counts_a, n_a))):
        gaps.append(_cp_lower(ka, na, level) - np.exp(epsilon) * _cp_upper(kb, nb, level))
    return float(np.max(np.concatenate(gaps)))


def mu_lower_bound(counts_a, n_a, counts_b, n_b, *, alpha=1e-6):
    r"""Lower confidence bound on max_E Phi^-1(P_a(E)) - Phi^-1(P_b(E)), both directions.

    A mechanism that is mu-GDP (Dong, Roth & Su 2022, Definition 2.6), such
    as a Gaussian mechanism with noise ``sigma = sensitivity / mu``, has
    :math:`P_b(E) \ge \Phi(\Phi^{-1}(P_a(E)) - \mu)` for every event E, so
    this quantity is at most mu. For two Gaussians ``sigma`` apart times
    ``s`` it equals ``s`` on every half-line event.
    """
    counts_a, counts_b = np.asarray(counts_a), np.asarray(counts_b)
    level = alpha / (4 * counts_a.size)
    best = -np.inf
    for (ka, na), (kb, nb) in (((counts_a, n_a), (counts_b, n_b)), ((counts_b, n_b), (counts_a, n_a))):
        low, high = _cp_lower(ka, na, level), _cp_upper(kb, nb, level)
        ok = (low > 0) & (high < 1)
        if np.any(ok):
            best = max(best, float(np.max(stats.norm.ppf(low[ok]) - stats.norm.ppf(high[ok]))))
    return best


def tail_statistic(samples, values_a, values_b):
    """How far every moving coordinate lies beyond both noise-free values, towards world a.

    ``samples`` has shape (n, m); ``values_a`` and ``values_b`` (shape (m,))
    are the noise-free releases on the two neighbouring inputs. Coordinate j
    with ``a_j > b_j`` contributes ``x_j - a_j``, one with ``a_j < b_j``
    contributes ``a_j - x_j``; unchanged coordinates are ignored; the statistic
    is the minimum. For additive Laplace noise of scale b, every point of
    ``{T > t}``, t >= 0, lies in the tails of all moving coordinates, where the
    likelihood ratio is exactly ``exp(||a - b||_1 / b)``: the half-line events
    of this statistic see the mechanism's whole privacy loss with probability
    about ``2**-m``, which a 1-D projection such as the sum does not.
    """
    values_a, values_b = np.asarray(values_a, dtype=float), np.asarray(values_b, dtype=float)
    moving = values_a != values_b
    sign = np.sign(values_a - values_b)[moving]
    return np.min(sign * (np.asarray(samples, dtype=float)[:, moving] - values_a[moving]), axis=1)
