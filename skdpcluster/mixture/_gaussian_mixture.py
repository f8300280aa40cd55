r"""PrivateGaussianMixture: mixtures of separated Gaussians via k-tuple clustering.

PrivatekGMM of Cohen, Kaplan, Mansour, Stemmer & Tsfadia (2021, arXiv:2112.14445,
Section 6), as specified in ``spec/cohen_ktuple.md`` §9: a non-private labelling of
many small blocks of the data gives one k-tuple of per-label means per block
(GenEmpiricalMeans); private k-tuple clustering of these tuples gives k private
centres; the remaining ("fresh") rows are assigned to the centres, and a private
single-Gaussian learner (CoinPress-style, :func:`~skdpcluster.averaging.private_gaussian_estimate`)
and a noisy count per component give the means, covariances and weights.
"""

import math
from dataclasses import dataclass
from functools import partial
from numbers import Integral, Real

import numpy as np
from scipy import linalg
from scipy.special import logsumexp
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted, validate_data

from skdpcluster.ktuple._framework import FLOAT_MAX, nearest_gaps
from skdpcluster.ktuple._tuples import allocate_blocks, generate_tuples_of_rows
from skdpcluster.averaging import private_gaussian_estimate
from skdpcluster.averaging._common import _split_evenly, project_into_ball
from skdpcluster.averaging.gaussian import _MAX_NOISE_SCALE, _learner_accepts
from skdpcluster.cluster._base import (
    PrivateFit,
    PrivateFitPlan,
    _PrivateFitMixin,
)
from skdpcluster.cluster._stable_init import nearest_centers
from skdpcluster.cluster._ktuple import (
    AUTO_FALLBACK_SHARE,
    KTupleClusterer,
    plan_fallback,
    run_fallback,
    unused_share_event,
    warn_if_general_method_short,
)
from skdpcluster.exceptions import InsufficientDataError, PrivacyLeakWarning, UtilityWarning
from skdpcluster.mechanisms import PrivacyEvent, analytic_gaussian_sigma, zcdp_gaussian_mechanism
from skdpcluster.utils import check_random_state
from skdpcluster.utils._compat import Interval, StrOptions
from skdpcluster.utils._data import (
    DaskRows,
    RowChunk,
    as_rows,
    check_dask_predict_input,
    is_dask_collection,
)
from skdpcluster.utils._docstrings import shared_params
from skdpcluster.utils._progress import phase
from skdpcluster.utils._warnings import warn_user

__all__ = ["PrivateGaussianMixture"]

#: Share of the rows used for the k-tuples when ``samples_per_tuple="auto"``.
TUPLE_SHARE = 0.5
#: Share of each component's budget spent on the refinement pass (the rest on the learner).
REFINE_SHARE = 0.25
#: Rounds of the refinement pass (clipped mean, then log-scale, per round).
REFINE_ROUNDS = 3
#: The clipping radius after a round is this many times the private typical distance.
SCALE_CLIP_FACTOR = 6.0
#: The log-distances of a round are clipped to ``[log(radius) - this, log(radius)]``.
LOG_SCALE_RANGE = math.log(1e4)
#: ``sigma_max="auto"`` is this many times the private typical distance to the centre.
#: ``exp(E log||z||) >= 0.53 sqrt(tr Sigma)`` for every Gaussian z (the rank-1 case is the
#: worst), so 2.5 bounds ``sqrt(||Sigma||_2) <= sqrt(tr Sigma)`` with a third to spare.
AUTO_SIGMA_MAX_FACTOR = 2.5
#: ``sigma_min="auto"`` is the typical distance divided by this (times ``sqrt(d / 10)`` above
#: d = 10): the covariance floor is then about 1% of the total variance, or a tenth of the
#: mean eigenvalue in high dimension. A floor far below the truth would let noise-dominated
#: directions collapse and ruin the likelihood; one above it would bias ill-conditioned
#: components upwards.
AUTO_FLOOR_DIVISOR = 10.0
#: Every coordinate of a fresh row is clipped to ``[-NUMERIC_BOUND, NUMERIC_BOUND]`` (a public
#: per-row map, so privacy is unchanged): the squared distances of the learner then cannot
#: overflow, which on extreme rows ended the private step in a data-dependent exception
#: (issue #12, item 5). No row of a realistic data set is moved.
NUMERIC_BOUND = 1e100
AUTO_FLOOR_DIMENSION = 10.0
#: Steps of the learner's mean and covariance stages (``n_iter_mean``, ``n_iter_cov``): the
#: refinement pass already gives a good initial ball, so the covariance gets more steps.
LEARNER_ITERATIONS = (2, 4)
#: ``sigma_min`` is raised to at least ``sigma_max`` times this, so that every released
#: covariance (condition number at most 1e12) stays numerically positive definite.
MIN_SIGMA_RATIO = 1e-6
#: Public floor of ``sigma_min`` and ``sigma_max``. The learner whitens rows of norm up to
#: ``NUMERIC_BOUND * sqrt(d)`` by ``1 / sigma_min``; with ``sigma_min >= SIGMA_FLOOR`` and the
#: ratio above, their squared norms stay below 1e300 instead of overflowing to NaN (a noisy
#: scale near 0 on a handful of rows ended the private step in ``eigh``'s LinAlgError).
SIGMA_FLOOR = 1e-40
#: ``None`` bounds: the empirical extreme standard deviations, widened by this factor.
DATA_SIGMA_MARGIN = 2.0

#: ``fallback_info_["reason"]`` when only the single-Gaussian learner fell back.
_LEARNER_FALLBACK_REASON = (
    "the Gaussian learner's pre-draw check refused the released noisy count and bounds of the "
    "components in 'learner_fallback' (a noise scale above 1e152): their means are the "
    "refinement pass's centres and their covariances isotropic from its private scale")

#: ``quality_`` when no private test ran (one component, or too few rows for the tuple path).
_NO_TEST = {"test": None, "test_passed": None, "located_width": None}

_COVARIANCE_TYPES = ("full", "tied", "diag", "spherical")
# The parameters shared with KTupleClusterer keep its constraints.
_KTUPLE_CONSTRAINTS = KTupleClusterer._parameter_constraints


# ---------------------------------------------------------------------------
# Budget of the fresh part (spec §9.3, with the tighter split derived here)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _FreshBudget:
    r"""Named split of the fresh part's budget; every release there is a Gaussian mechanism.

    Per component, the refinement pass may spend ``rho_refine`` and the
    learner ``rho_learner`` (zCDP under add/remove of one row of that
    component); each pass also releases the k counts with noise
    :math:`\sigma_c = 1/\sqrt{2\rho_{\mathrm{pass}}}`. In GDP terms a Gaussian
    release of whitened sensitivity s at zCDP :math:`\rho` adds
    :math:`\mu^2 = 2 s^2 \rho`. One changed fresh row either stays in its
    component (a swap: s = 2 in that learner, counts unchanged:
    :math:`\mu^2 = 8\rho_{\mathrm{pass}}`) or moves between two (s = 1 in two
    learners, :math:`4\rho_{\mathrm{pass}}`, and two counts change by one, L2
    sensitivity :math:`\sqrt 2`, :math:`2/\sigma_c^2 = 4\rho_{\mathrm{pass}}`:
    :math:`\mu^2 = 8\rho_{\mathrm{pass}}` again). Over both passes
    :math:`\mu^2 = 8(\rho_{\mathrm{refine}} + \rho_{\mathrm{learner}})`, and
    ``mu`` is chosen so that :math:`\mu`-GDP is exactly
    ``(epsilon, delta)``-DP.
    """

    epsilon: float
    delta: float
    mu: float
    rho_refine: float
    rho_learner: float

    @classmethod
    def for_target(cls, epsilon, delta):
        # mu-GDP is the trade-off of the Gaussian mechanism with sensitivity/noise ratio mu,
        # so mu = 1/sigma with sigma the analytic calibration at sensitivity 1 (Balle & Wang
        # 2018, Theorem 8; Dong, Roth & Su 2022, Corollary 2.13).
        mu = 1.0 / analytic_gaussian_sigma(1.0, epsilon, delta)
        per_component = mu * mu / 8.0
        rho_refine, rho_learner = REFINE_SHARE * per_component, (1.0 - REFINE_SHARE) * per_component
        # The smallest zCDP share of a release: the refinement's steps and the learner's (half
        # of rho_learner over its longer stage). A share that rounds to 0 was refused inside the
        # private step, a charged failure (review R10 M1: epsilon = delta = 1e-220).
        if not min(rho_refine / (2 * REFINE_ROUNDS),
                   _split_evenly(rho_learner / 2.0, max(LEARNER_ITERATIONS))) > 0:
            raise ValueError(
                f"epsilon={epsilon!r} and delta={delta!r} are too small for "
                "PrivateGaussianMixture: the zCDP share of a Gaussian release rounds to 0.")
        return cls(float(epsilon), float(delta), mu, rho_refine, rho_learner)

    def event(self, released, events):
        """The composite event of the fresh part: ``(epsilon, delta)``, priced even if not run."""
        details = {"composition": "gaussian_dp", "mu": self.mu, "released": bool(released),
                   "rho_refine_per_component": self.rho_refine,
                   "rho_learner_per_component": self.rho_learner,
                   "events": [event.to_dict() for event in events]}
        return PrivacyEvent("private_gaussian_mixture_fresh", self.epsilon, self.delta,
                            rho=self.mu * self.mu / 2.0, label="gaussian_mixture/fresh_part",
                            neighbouring="replace_one", details=details)


def _tuple_rows(X, with_tuples, n_tuples, samples_per_tuple):
    """Rows of :math:`X_1` (public): ``n_tuples * samples_per_tuple``, per chunk on Dask rows.

    On Dask rows every chunk holds whole blocks (:func:`allocate_blocks`; raises a
    ValueError before any randomness when the chunks are too small); the fallback's
    rows (``with_tuples=False``) are spread over the chunks in proportion to their sizes.
    """
    n_rows = n_tuples * samples_per_tuple
    if not hasattr(X, "chunk_rows"):
        return n_rows
    if not with_tuples:
        return allocate_blocks(X.chunk_rows, n_rows, 1)
    return allocate_blocks(X.chunk_rows, n_tuples, samples_per_tuple) * samples_per_tuple


def _parallel_event(tuple_events, fresh_event):
    """One event for the fit: the maximum of the two parts on disjoint rows."""
    tuple_cost = (math.fsum(e.cost()[0] for e in tuple_events),
                  math.fsum(e.cost()[1] for e in tuple_events))
    details = {
        "composition": "parallel: the tuple rows X1 and the fresh rows X2 are disjoint",
        "tuple_part": {"epsilon": tuple_cost[0], "delta": tuple_cost[1],
                       "events": [event.to_dict() for event in tuple_events]},
        "fresh_part": fresh_event.to_dict(),
    }
    return PrivacyEvent("private_gaussian_mixture", max(tuple_cost[0], fresh_event.epsilon),
                        max(tuple_cost[1], fresh_event.delta), label="PrivateGaussianMixture.fit",
                        neighbouring="replace_one", details=details)


# ---------------------------------------------------------------------------
# Fresh part: assignment, noisy counts, refinement, learners
# ---------------------------------------------------------------------------


def _noisy_counts(counts, n_components, rho_pass, rng, stage):
    """Counts of every component plus N(0, 1/(2 rho_pass)): the counts' share of a pass."""
    return zcdp_gaussian_mechanism(np.asarray(counts, dtype=float), sensitivity=math.sqrt(2.0),
                                   rho=2.0 * rho_pass, rng=rng,
                                   label=f"gaussian_mixture/counts_{stage}",
                                   neighbouring="replace_one")


def _bounded(rows):
    """Every coordinate clipped to ``[-NUMERIC_BOUND, NUMERIC_BOUND]`` (a public per-row map)."""
    return np.clip(rows, -NUMERIC_BOUND, NUMERIC_BOUND)


def _split_rows(X, n_tuple_rows, rng):
    """Step 1: the tuple rows :math:`X_1` and the fresh rows :math:`X_2` (bounded), at random.

    In memory, the first ``n_tuple_rows`` rows of a permutation of all rows;
    on Dask rows (``n_tuple_rows`` per chunk, public), the same split inside
    every chunk (:meth:`~skdpcluster.utils._data.DaskRows.split`): the
    in-memory split when there is one chunk.
    """
    if hasattr(X, "split"):
        tuple_rows, fresh = X.split(n_tuple_rows, rng)
        return tuple_rows, DaskRows(fresh.map_rows(_bounded, n_columns=fresh.shape[1]))
    order = rng.permutation(X.shape[0])
    return X[order[:n_tuple_rows]], _bounded(X[order[n_tuple_rows:]])


def _components(fresh, centers):
    """The fresh rows of every component (nearest centre) and their exact counts.

    In memory, one assignment and k arrays; on Dask rows, one pass for the
    counts and k lazy row sets, each assigning its chunks again on every pass.
    """
    k = len(centers)
    if hasattr(fresh, "map_reduce"):
        counts = fresh.map_reduce(_component_counts, centers)
        return [fresh.with_chunks(partial(_component_chunk, centers=centers, component=j))
                for j in range(k)], counts
    labels = nearest_centers(fresh, centers)[0]
    return [fresh[labels == j] for j in range(k)], np.bincount(labels, minlength=k)


def _component_counts(chunk, centers):
    """Rows of a chunk nearest to each centre (one pass of a map-reduce)."""
    return np.bincount(nearest_centers(chunk.X, centers)[0], minlength=len(centers))


def _component_chunk(block, centers, component):
    """The rows of a chunk nearest to ``centers[component]``."""
    rows = np.asarray(block, dtype=np.float64)
    return RowChunk(rows[nearest_centers(rows, centers)[0] == component])


def _clipped_offset_sum(chunk, center, radius):
    """``sum(clip(x - center, radius))`` over a chunk of rows (each of exact norm <= ``radius``)."""
    offsets = chunk.X - center
    project_into_ball(offsets, radius)
    return offsets.sum(axis=0)


def _clipped_mean_sensitivity(radius, n_public):
    """Add/remove L2 sensitivity of the clipped mean: one offset of norm at most ``radius``."""
    return radius / n_public


def _clipped_mean(points, n_public, center, radius, rho, rng):
    """``center`` plus ``sum(clip(x - center, radius)) / n_public`` plus Gaussian noise.

    Each clipped offset has norm at most ``radius``: add/remove sensitivity ``radius / n_public``
    (:func:`_clipped_mean_sensitivity`). The noise goes on the mean offset and ``center`` (public
    or released) is added after, as post-processing: added to ``center`` first, the offset was
    rounded at the ulp of ``center``, which one row moved by up to 4069 sensitivities far from 0
    (review R10, H1; ``doc/privacy.rst``, "Noise on offsets, not on positions"). ``points`` is an
    array or rows of :mod:`skdpcluster.utils._data` (one pass).
    """
    total = as_rows(points).map_reduce(_clipped_offset_sum, center, radius)
    offset, event = zcdp_gaussian_mechanism(
        total / n_public, sensitivity=_clipped_mean_sensitivity(radius, n_public), rho=rho,
        rng=rng, label="gaussian_mixture/refine_mean", neighbouring="add_remove")
    return center + offset, event


def _centred_log_distance_sum(chunk, center, low, high, middle):
    """``sum(clip(log||x - center||, low, high) - middle)`` over a chunk of rows."""
    distances = np.maximum(np.linalg.norm(chunk.X - center, axis=1), np.finfo(float).tiny)
    return (np.clip(np.log(distances), low, high) - middle).sum()


def _log_scale_sensitivity(n_public):
    """Add/remove sensitivity of the centred log-distance mean: one term in ``[-L/2, L/2]``."""
    return LOG_SCALE_RANGE / (2.0 * n_public)


def _log_scale(points, n_public, center, radius, rho, rng):
    """Private mean of ``log||x - center||``, clipped to ``[log(radius) - L, log(radius)]``.

    The clipped values are centred at the middle of the interval and summed, then divided
    by ``n_public``: add/remove sensitivity ``L / (2 n_public)`` (:func:`_log_scale_sensitivity`).
    One pass over ``points``.
    """
    high = math.log(radius)
    low, middle = high - LOG_SCALE_RANGE, high - LOG_SCALE_RANGE / 2.0
    total = as_rows(points).map_reduce(_centred_log_distance_sum, center, low, high, middle)
    offset, event = zcdp_gaussian_mechanism(
        total / n_public, sensitivity=_log_scale_sensitivity(n_public), rho=rho, rng=rng,
        label="gaussian_mixture/refine_log_scale", neighbouring="add_remove")
    return middle + offset, event  # the noise on the offset from the public middle, as above


def _refine_component(points, n_public, center, radius, rho, rng):
    r"""Refinement pass of one component: a better centre, a clipping radius and a scale.

    Each of ``REFINE_ROUNDS`` rounds releases a clipped mean around the
    current centre and then the mean log-distance :math:`v` of the rows to it;
    the radius becomes :math:`\min(r, 6 e^{v})`. :math:`e^{v}` is about
    :math:`\sqrt{\|e\|^2 + \mathrm{tr}\,\Sigma}` (:math:`e` the centre's
    error), a private upper bound on the component's spread. Every release is
    a Gaussian mechanism at ``rho / (2 * REFINE_ROUNDS)`` (add/remove).
    """
    rho_step = rho / (2 * REFINE_ROUNDS)
    # The smallest radius whose mean step has a normal noise scale (the mechanisms refuse a
    # subnormal one): coincident released centres start at a gap of 0 (public post-processing).
    floor = 4.0 * np.finfo(float).tiny * n_public * max(1.0, math.sqrt(2.0 * rho_step))
    radius = max(radius, floor)
    events = []
    for _ in range(REFINE_ROUNDS):
        center, mean_event = _clipped_mean(points, n_public, center, radius, rho_step, rng)
        log_scale, scale_event = _log_scale(points, n_public, center, radius, rho_step, rng)
        # Post-processing: every clipped log-distance lies in [log(radius) - L, log(radius)].
        high = math.log(radius)
        scale = math.exp(min(max(log_scale, high - LOG_SCALE_RANGE), high))
        radius = max(min(radius, SCALE_CLIP_FACTOR * scale), floor)
        events += [mean_event, scale_event]
    return center, radius, scale, events


def _empirical_sigmas(points):
    """Extreme standard deviations of ``points`` (the leaking ``None`` path); None below 2 rows."""
    if points.shape[0] < 2:
        return None
    eigenvalues = np.linalg.eigvalsh(np.atleast_2d(np.cov(points, rowvar=False)))
    return math.sqrt(max(eigenvalues[0], 0.0)), math.sqrt(max(eigenvalues[-1], 0.0))


def _auto_sigmas(scale, n_features):
    r"""``sigma_min="auto"`` and ``sigma_max="auto"`` from the private typical distance ``scale``.

    With :math:`S \approx \sqrt{\mathrm{tr}\,\Sigma}` (see ``AUTO_SIGMA_MAX_FACTOR``),
    :math:`\sigma_{\max} = 2.5 S` and :math:`\sigma_{\min} = S / (10\max(1, \sqrt{d/10}))`,
    so the covariance floor :math:`\sigma_{\min}^2` is about
    :math:`\min(\mathrm{tr}\,\Sigma / 100, \mathrm{tr}\,\Sigma / (10 d))`.
    """
    divisor = AUTO_FLOOR_DIVISOR * max(1.0, math.sqrt(n_features / AUTO_FLOOR_DIMENSION))
    return scale / divisor, AUTO_SIGMA_MAX_FACTOR * scale


def _refined_estimate(center, scale, sigma_min, sigma_max):
    r"""A component's release from its refinement pass alone, where the learner cannot run.

    The mean is the refined centre; the covariance is :math:`s^2 I` with
    :math:`s = \mathrm{scale}/\sqrt d` (the private typical distance
    :math:`S \approx \sqrt{\mathrm{tr}\,\Sigma}` spread over the d
    directions) clipped into the component's bounds, each first capped at
    ``_MAX_NOISE_SCALE`` so that :math:`s^2` is finite. Post-processing of
    released values (and of the bounds). Returns the mean, the covariance and
    the bounds it lies within, as :meth:`PrivateGaussianMixture._learn_component`.
    """
    low, high = min(sigma_min, _MAX_NOISE_SCALE), min(sigma_max, _MAX_NOISE_SCALE)
    std = min(max(scale / math.sqrt(center.shape[0]), low), high)
    return center, std * std * np.eye(center.shape[0]), low, high


# ---------------------------------------------------------------------------
# Covariance formats (scikit-learn's conventions)
# ---------------------------------------------------------------------------


def _covariances_of_type(full, weights, covariance_type):
    """The full (k, d, d) covariances in the format of ``covariance_type``."""
    if covariance_type == "full":
        return full
    if covariance_type == "tied":
        return np.einsum("k,kij->ij", weights, full)
    diagonals = np.diagonal(full, axis1=1, axis2=2).copy()
    return diagonals if covariance_type == "diag" else diagonals.mean(axis=1)


def _precision_cholesky_full(covariance):
    """Upper-triangular P with P P^T = inverse(covariance), as scikit-learn stores it."""
    lower = linalg.cholesky(covariance, lower=True)
    return linalg.solve_triangular(lower, np.eye(covariance.shape[0]), lower=True).T


def _precisions_cholesky(covariances, covariance_type):
    if covariance_type == "full":
        return np.stack([_precision_cholesky_full(c) for c in covariances])
    if covariance_type == "tied":
        return _precision_cholesky_full(covariances)
    return 1.0 / np.sqrt(covariances)


def _as_full(values, covariance_type, n_components, n_features):
    """A per-type array (covariances or precision Cholesky factors) as (k, d, d) matrices."""
    if covariance_type == "full":
        return values
    if covariance_type == "tied":
        return np.broadcast_to(values, (n_components, n_features, n_features))
    diagonals = np.broadcast_to(np.reshape(values, (n_components, -1)), (n_components, n_features))
    return diagonals[:, :, None] * np.eye(n_features)


def _weighted_log_prob(X, weights, means, precisions_cholesky, covariance_type):
    """log(w_j) + log N(x | mu_j, Sigma_j) for every row and component, shape (n, k)."""
    k, d = means.shape
    factors = _as_full(precisions_cholesky, covariance_type, k, d)
    log_prob = np.empty((X.shape[0], k))
    for j in range(k):
        whitened = (X - means[j]) @ factors[j]
        log_det = np.sum(np.log(np.diagonal(factors[j])))
        log_prob[:, j] = log_det - 0.5 * (d * math.log(2 * math.pi) + np.sum(whitened**2, axis=1))
    return log_prob + np.log(weights)


#: Functions of the weighted log probabilities (n, k) of rows, by the method that returns them.
_STATISTICS = {
    "score_samples": lambda weighted: logsumexp(weighted, axis=1),
    "predict_proba": lambda weighted: np.exp(weighted - logsumexp(weighted, axis=1,
                                                                  keepdims=True)),
    "predict": lambda weighted: weighted.argmax(axis=1).astype(np.intp),
}


def _statistic_of_rows(X, parameters, statistic):
    """``_STATISTICS[statistic]`` of the rows ``X`` (an array, or one block of a Dask array).

    ``parameters``: the released ``(weights, means, precisions_cholesky, covariance_type)``.
    """
    return _STATISTICS[statistic](_weighted_log_prob(X, *parameters))


def _labels_or_none(X, parameters):
    """Most likely component of every row; -1 everywhere when nothing was released (``None``)."""
    if parameters is None:
        return np.full(X.shape[0], -1, dtype=np.intp)
    return _statistic_of_rows(X, parameters, "predict")


# ---------------------------------------------------------------------------
# The estimator
# ---------------------------------------------------------------------------


def _sigma_constraint():
    return [None, StrOptions({"auto"}), Interval(Real, 0, None, closed="neither")]


@shared_params
class PrivateGaussianMixture(_PrivateFitMixin, ClusterMixin, BaseEstimator):
    r"""Differentially private Gaussian mixture of separated components (Cohen et al. 2021, §6).

    PrivatekGMM (arXiv:2112.14445, Section 6.2; ``spec/cohen_ktuple.md`` §9.2):

    1. The rows are permuted at random; the first ``n_tuples * samples_per_tuple``
       form :math:`X_1`, the rest the *fresh* rows :math:`X_2`.
    2. GenEmpiricalMeans: :math:`X_1` is cut into ``n_tuples`` blocks; the
       non-private ``base_estimator`` labels each block and the k per-label
       means form one k-tuple (an empty label gives the zero vector).
    3. Private k-tuple clustering of the tuples
       (:class:`~skdpcluster.KTupleClusterer`'s ``"located"``, ``"noisy_centers"``
       or ``"averages"``, provable defaults) gives k centres
       :math:`\hat c_j`, or a failed private test.
    4. Each fresh row goes to its nearest centre. A *refinement pass*
       (not in the paper; a quarter of each component's budget) releases,
       per component, a better centre and a private scale (two rounds of a
       clipped mean and a mean log-distance); the fresh rows are then
       re-assigned to the refined centres. This makes the assignment
       robust to the k-tuple noise, which grows like :math:`\sqrt d`
       (§9.4, item 6), and gives ``sigma_max="auto"``.
    5. Per component, the CoinPress-style learner
       :func:`~skdpcluster.averaging.private_gaussian_estimate` (§9.6)
       releases the mean and the covariance, dividing by a noisy count.
       Where its pre-draw check would refuse the released count and bounds
       (a noise scale above 1e152: tiny budgets, from about
       :math:`\varepsilon = \delta = 10^{-73}` down with ``"auto"`` bounds
       and a noisy count near 1),
       that component releases its refinement instead: the refined centre
       and :math:`s^2 I`, :math:`s` the private scale over :math:`\sqrt d`
       clipped into its bounds (``status_="fallback"``,
       ``fallback_info_["learner_fallback"]``, a
       :class:`~skdpcluster.UtilityWarning` after the fit). The test is on
       released values, so it is post-processing; no learner noise is drawn
       for that component, and the fit is charged its plan all the same.
       (A refusal before any spend cannot replace it: the bounds are
       released, and ``sigma_max`` grows with the released centres' gap,
       which ``"noisy_centers"`` does not bound.)
    6. Weights :math:`\hat w_j = \max(\hat n_j, 1) / \sum_l \max(\hat n_l, 1)`
       from the noisy counts (§9.2 step 5 clips at 0; clipping at 1 keeps
       every log-likelihood finite).

    **Privacy** (replace-one neighbours, the number of rows public;
    Theorem 6.1, §9.3). The split of step 1 does not depend on the data, so a
    changed row is in :math:`X_1` or in :math:`X_2`, never both:

    * in :math:`X_1`, one block and hence one tuple changes; the k-tuple
      algorithm is :math:`(\varepsilon, \delta)`-DP on tuples, and everything
      after it is post-processing of its output and the unchanged
      :math:`X_2`;
    * in :math:`X_2`, the centres have the same distribution, and given them
      every release of steps 4-6 is a Gaussian mechanism. A changed fresh
      row either stays in its component (a swap: twice the add/remove
      sensitivity, counts unchanged) or moves between two components (one
      removal, one addition, and two counts change by one). With per-component
      add/remove budgets :math:`\rho_1` (refinement) and :math:`\rho_2`
      (learner) and count noise :math:`\sigma_c = 1/\sqrt{2\rho_p}` in pass
      :math:`p`, both cases give :math:`\mu^2 = 8(\rho_1 + \rho_2)` in total,
      so the part is :math:`\mu`-GDP by the adaptive composition of Gaussian
      mechanisms (Dong, Roth & Su 2022, Corollary 3.3), with :math:`\mu`
      chosen so that this is exactly :math:`(\varepsilon, \delta)`-DP (Balle
      & Wang 2018, Theorem 8).

    By parallel composition the fit is :math:`(\max(\varepsilon_{T},
    \varepsilon), \max(\delta_{T}, \delta)) = (\varepsilon, \delta)`-DP. This
    is tighter than the spec's decision (tuples at :math:`(\varepsilon,
    \delta)`, learners at :math:`(\varepsilon/3, \delta/2)` and
    :math:`\mathrm{Lap}(6/\varepsilon)` counts), which also misses the
    same-component swap (group privacy 2 for an add/remove learner). The
    ledger holds **one** composite event with both parts in its ``details``;
    its cost is what ``privacy_spent_`` reports and the accountant is charged,
    whether or not the private test succeeds.

    **Utility** (Theorem 6.2, §9.4): the blocks need enough rows of every
    component for the labelling to be right and the per-label means to be
    tight (``noisy_centers`` needs them about :math:`2\Delta + 2`-far, with
    :math:`\Delta` in the hundreds); the means must be more than about
    :math:`2\sigma_{\max}\sqrt{2\log(2nk/\beta)}` apart for the nearest-centre
    assignment; the learner needs about :math:`d^2` rows per component, and
    its accuracy scales with ``sigma_max``, so a tight public bound helps.

    **Dask input** (issue #20; the guide's "Fitting out of core on Dask"):
    ``fit`` accepts a :class:`dask.array.Array` or a dask dataframe of numeric
    columns with known chunk sizes. The split of step 1 is drawn inside every
    chunk (``n_tuples * samples_per_tuple`` tuple rows in all, whole blocks per
    chunk, in proportion to the public chunk sizes), the tuples of step 2 are
    computed where the chunks live, and every statistic of steps 4-6 (counts,
    clipped sums, the learner's moments) is one map-reduce, with the noise
    added once in the driver by the same mechanisms. A changed row is still in
    one part and, in the tuple rows, in one block, so the privacy analysis is
    unchanged. With one chunk the release is the in-memory one, bit for bit;
    with several, the split and the blocks are random within the chunks: the
    same distribution when the rows are in random order across chunks.
    ``sigma_min=None`` or ``sigma_max=None`` (bounds from the data) is refused
    on Dask input before anything is spent.

    Read more in ``spec/cohen_ktuple.md`` §9.

    Parameters
    ----------
    n_components : int, default=2
        Number of components k. ``n_components=1`` skips the k-tuple part:
        steps 4-6 run on every row from the centre and radius of the data
        ball (public, or released privately with ``data_radius=None``), so
        the mean and covariance come from the refinement pass and
        :func:`~skdpcluster.averaging.private_gaussian_estimate` on the whole
        ``(epsilon, delta)`` (``method_="one_component"``,
        ``status_="success"``).
    covariance_type : {"full", "tied", "diag", "spherical"}, default="full"
        Format of the released covariances, as in
        :class:`sklearn.mixture.GaussianMixture`. The learner always estimates a
        full covariance per component; ``"diag"`` keeps its diagonal,
        ``"spherical"`` its mean variance and ``"tied"`` the weighted average of
        the k matrices (post-processing, no extra privacy cost).
    {epsilon}
    {delta}
    beta : float, default=0.05
        Failure probability of the private k-tuple test on well-separated data.
    base_estimator : estimator, default=None
        The non-private labelling algorithm, cloned per block with
        ``n_clusters`` (or ``n_components``) set to ``n_components``; its
        ``labels_`` (or ``predict``) label the block. ``None`` uses
        ``KMeans(init="k-means++", n_init=1)``, solved by a fast batched path.
        A :class:`sklearn.mixture.GaussianMixture` also works (slower).
    tuple_method : {"auto", "located", "noisy_centers", "averages"}, default="auto"
        The private k-tuple clustering (see :class:`~skdpcluster.KTupleClusterer`):
        ``"located"`` (locate, then average; issue #13) on the tuples alone, or
        the paper's methods. ``"auto"`` is ``"located"`` (with a private bound
        when ``data_radius=None``).
    n_tuples : int or "auto", default="auto"
        Number of blocks t. ``"auto"``: the minimum admissible number
        (:func:`~skdpcluster.ktuple.min_tuples`) for ``"noisy_centers"``;
        for ``"averages"`` the larger of that and ``n_samples // (2 * 15 k)``;
        for ``"located"`` as :class:`~skdpcluster.KTupleClusterer` on half the rows.
    samples_per_tuple : int or "auto", default="auto"
        Rows per block s (at least ``n_components``). ``"auto"``: half of the
        rows go to the blocks, ``(n_samples // 2) // n_tuples``.
    separation : float, default=None
        Delta of ``"noisy_centers"`` (> 6); ``None`` uses the paper's
        :math:`(10/\varepsilon)\,k\log(k/\delta)\sqrt{\log(k/\beta)}`.
    data_radius : float, default=None
        Public bound Lambda on ``||x - data_center||``, used by ``"located"``
        and ``"averages"`` (so by the default ``"auto"``).
        {private_bound}
        With ``"data"`` the exact bound is used but not stored
        (``data_radius_`` is ``nan``) and ``privacy_spent_["proven"]`` is
        False. At most 1e100.
    data_center : array-like of shape (n_features,), default=None
        Public centre of the data ball; ``None`` means the origin.
    r_min : float, default=None
        Resolution of ``"averages"``; ``None`` means ``1e-4 * data_radius``.
    sigma_min, sigma_max : float, "auto" or None, default="auto"
        Public bounds :math:`\sigma_{\min}^2 I \preceq \Sigma_j \preceq
        \sigma_{\max}^2 I` of the learner (§9.1). A float is used for every
        component. ``"auto"`` derives them from private releases, so it costs
        no privacy: with :math:`S` the refinement pass's private typical
        distance of the component's rows to its centre (about
        :math:`\sqrt{\mathrm{tr}\,\Sigma_j}`), ``sigma_max`` is :math:`2.5 S`
        (an upper bound on :math:`\sqrt{\|\Sigma_j\|_2}` when the centre is
        accurate) and ``sigma_min`` is :math:`S / (10 \max(1, \sqrt{d/10}))`, a
        covariance floor of about 1% of the total variance (a tenth of the
        mean eigenvalue above d = 10): lower floors let noise-dominated
        directions collapse and ruin the likelihood. ``None`` takes them from the
        extreme eigenvalues of the component's fresh rows, widened by a factor
        2, and emits a :class:`~skdpcluster.exceptions.PrivacyLeakWarning`;
        such a bound is used but not stored (its ``sigma_min_`` or
        ``sigma_max_`` is ``nan``), and the fit reports
        ``privacy_spent_["proven"] = False``.
        The learner's accuracy scales with ``sigma_max``.
    reg_covar : float, default=1e-6
        Added to the diagonal of every released covariance, as in scikit-learn.
    fallback_share : "auto" or float in [0, 1), default="auto"
        Share of (epsilon, delta) of the tuple rows reserved for the general
        method, :class:`~skdpcluster.PrivateStableKMeans` on the tuple rows,
        whose centres the fresh part then refines when the k-tuple test
        fails (``status_="fallback"``). Decided from public values and charged
        whatever the outcome; the tuple rows and the fresh rows are disjoint,
        so it composes with the k-tuple path only. Too few rows for the tuple
        path (a public fact) give the whole budget of the tuple rows to the
        fallback instead of raising. ``"auto"``: with ``"located"``,
        nothing is reserved: when the location fails, the general method (the
        grid initializer of :class:`~skdpcluster.PrivateStableKMeans`) runs
        on the tuple rows with the zCDP share the tuple averaging would have
        spent, at the same cost; with the paper's methods 10% is reserved;
        all of it when the tuple path cannot run. ``0`` turns it off (a
        failed test releases nothing and too few rows raise).
    on_failure : {"warn", "raise"}, default="warn"
        When the private k-tuple test fails (and ``fallback_share=0``): ``"warn"`` sets
        ``status_="failure"``, leaves the parameters ``None`` and emits a
        :class:`~skdpcluster.exceptions.NotSeparatedWarning`; ``"raise"``
        raises :class:`~skdpcluster.exceptions.NotSeparatedError` and keeps the
        previous fitted state. Either way the whole budget is charged.
    {accountant}
    random_state : None, int or numpy.random.Generator, default=None
        ``None`` draws fresh OS entropy; an int or Generator makes the fit
        (and :meth:`sample`) reproducible.
    n_jobs : int, default=None
        Parallel jobs for the blocks (joblib; any backend, including Dask).
    {verbose}

    Attributes
    ----------
    weights_ : ndarray of shape (n_components,) or None
        Mixing weights (a private release); ``None`` after a failed test.
    means_ : ndarray of shape (n_components, n_features) or None
        Component means (a private release), in the canonical order of the
        k-tuple centres.
    covariances_ : ndarray or None
        Shape (k, d, d) for ``"full"``, (d, d) for ``"tied"``, (k, d) for
        ``"diag"``, (k,) for ``"spherical"``. Symmetric positive definite:
        every eigenvalue is at least ``min(sigma_min_) ** 2 + reg_covar``
        (the learner clips the spectrum into
        :math:`[\sigma_{\min}^2, \sigma_{\max}^2]`).
    precisions_ : ndarray or None
        Inverses of the covariances, same shapes.
    precisions_cholesky_ : ndarray or None
        Cholesky factors of the precisions, as in scikit-learn.
    converged_ : bool
        True when the private test passed and parameters were released
        (there is no EM loop; this mirrors scikit-learn's attribute).
    method_ : str
        The k-tuple aggregation used (``tuple_method`` with ``"auto"``
        resolved), or ``"one_component"`` for ``n_components=1``.
    status_ : {"success", "fallback", "failure"}
        ``"success"``: the private k-tuple test passed; ``"fallback"``: the
        tuple path could not run or its test failed and the fallback's
        centres were refined, or the learner could not run for some
        component (step 5); ``"failure"``: nothing released
        (``fallback_share=0`` only). A private release.
    fallback_info_ : dict or None
        After ``status_="fallback"``: the ``"reason"`` (from public or
        released values) and the ``"share"`` it ran on; with a reserved
        share the fallback's ``"stable_status"``, after the located method's
        own share ``"method"`` (``"grid"``), ``"rho"``, ``"share"`` of
        the tuple part's zCDP budget and ``"n_heavy_cells"`` (the grid's
        released count; below ``n_components``, a
        :class:`~skdpcluster.UtilityWarning` after the fit says that some
        centres are filler points). ``"learner_fallback"``: the components
        whose mean and covariance are their refinement's (step 5; the
        ``"reason"`` is the tuple path's when it fell back too). Only the
        tuple path's fallback gives a
        :class:`~skdpcluster.exceptions.NotSeparatedWarning` (and raises
        with ``on_failure="raise"``).
    quality_ : dict
        The k-tuple test's released outcome, as ``quality_`` of
        :class:`~skdpcluster.KTupleClusterer`:
        ``"test"`` (``"located"``, ``"partition_test"`` or ``None`` when no
        test ran), ``"test_passed"`` and ``"located_width"``.
    located_info_ : dict or None
        With ``tuple_method`` resolving to ``"located"``: the released grid
        width, number of released cells, location dimension and
        ``failed_step``, as in :class:`~skdpcluster.KTupleClusterer`.
    tuple_centers_ : ndarray of shape (n_components, n_features) or None
        The k private centres of step 3 (a private release).
    sigma_min_, sigma_max_ : ndarray of shape (n_components,) or None
        The learner's bounds for every component (for a component of
        ``fallback_info_["learner_fallback"]``, each capped at 1e152: the
        bounds of its covariance); all ``nan`` for a bound computed from the
        data (``sigma_min=None`` or ``sigma_max=None``).
    labels_ : ndarray of shape (n_samples,)
        :meth:`predict` on the training rows (-1 after a failure); a lazy
        Dask array after a fit on Dask input. **Not private**: a function of
        the training data.
    n_tuples_, samples_per_tuple_, n_fresh_ : int
        Blocks, rows per block, and fresh rows (public).
    m_, ell_, separation_, data_radius_ : int, float, float, float
        Public parameters of the k-tuple test (see
        :class:`~skdpcluster.KTupleClusterer`).
    {data_center_}
    privacy_spent_ : dict
        ``{"epsilon", "delta", "proven"}`` charged to the accountant; never
        more than requested.
    privacy_ledger_ : list of PrivacyEvent
        One composite event; its ``details`` hold the events of both parts.
    n_features_in_ : int
        Number of features seen during fit.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Names of features seen during fit, when ``X`` has string column names.

    See Also
    --------
    skdpcluster.KTupleClusterer : The private k-tuple clustering of step 3.
    sklearn.mixture.GaussianMixture : The non-private model with the same outputs.

    References
    ----------
    E. Cohen, H. Kaplan, Y. Mansour, U. Stemmer, E. Tsfadia. Differentially-Private
    Clustering of Easy Instances. ICML 2021 (full version arXiv:2112.14445, Section 6).

    S. Biswas, Y. Dong, G. Kamath, J. Ullman. CoinPress: Practical Private Mean and
    Covariance Estimation. NeurIPS 2020.

    Examples
    --------
    >>> from skdpcluster import PrivateGaussianMixture
    >>> from skdpcluster.datasets import make_separated_mixture
    >>> X, y = make_separated_mixture(200_000, n_clusters=2, n_features=2,
    ...                               separation=512, random_state=0)
    >>> gm = PrivateGaussianMixture(n_components=2, random_state=0).fit(X)
    >>> gm.status_
    'success'
    >>> gm.means_[:, 0].round()
    array([-512.,  512.])
    >>> gm.covariances_.shape
    (2, 2, 2)
    >>> gm.privacy_spent_["epsilon"] <= 1.0
    True
    """

    _parameter_constraints: dict = {
        **{name: _KTUPLE_CONSTRAINTS[name] for name in (
            "epsilon", "delta", "beta", "base_estimator", "n_tuples", "separation", "data_radius",
            "data_center", "r_min", "on_failure", "accountant", "random_state", "n_jobs",
            "verbose")},
        # k >= 2 is checked after the data, as in the clusterers (``_check_n_clusters``).
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "covariance_type": [StrOptions(set(_COVARIANCE_TYPES))],
        "tuple_method": _KTUPLE_CONSTRAINTS["method"],
        "samples_per_tuple": [StrOptions({"auto"}), Interval(Integral, 1, None, closed="left")],
        "sigma_min": _sigma_constraint(),
        "sigma_max": _sigma_constraint(),
        "reg_covar": [Interval(Real, 0.0, None, closed="left")],
        "fallback_share": [StrOptions({"auto"}), Interval(Real, 0, 1, closed="left")],
    }

    def __init__(
        self,
        n_components=2,
        *,
        covariance_type="full",
        epsilon=1.0,
        delta=1e-6,
        beta=0.05,
        base_estimator=None,
        tuple_method="auto",
        n_tuples="auto",
        samples_per_tuple="auto",
        separation=None,
        data_radius=None,
        data_center=None,
        r_min=None,
        sigma_min="auto",
        sigma_max="auto",
        reg_covar=1e-6,
        fallback_share="auto",
        on_failure="warn",
        accountant=None,
        random_state=None,
        n_jobs=None,
        verbose=0,
    ):
        self.n_components = n_components
        self.covariance_type = covariance_type
        self.epsilon = epsilon
        self.delta = delta
        self.beta = beta
        self.base_estimator = base_estimator
        self.tuple_method = tuple_method
        self.n_tuples = n_tuples
        self.samples_per_tuple = samples_per_tuple
        self.separation = separation
        self.data_radius = data_radius
        self.data_center = data_center
        self.r_min = r_min
        self.sigma_min = sigma_min
        self.sigma_max = sigma_max
        self.reg_covar = reg_covar
        self.fallback_share = fallback_share
        self.on_failure = on_failure
        self.accountant = accountant
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.verbose = verbose

    #: Every pass over the rows is a map-reduce of :mod:`skdpcluster.utils._data` (Dask input).
    _CHUNKED_INPUT = True
    #: The located grid width is 2 * bound * sqrt(2)**-j: hidden with a data-derived bound.
    _BOUND_DERIVED_ENTRIES = {"located_info_": ("width",), "quality_": ("located_width",)}
    _FITTED_ATTRIBUTES = (
        "converged_", "covariances_", "data_radius_", "ell_", "fallback_info_", "labels_",
        "located_info_", "m_", "means_", "method_", "n_fresh_", "n_tuples_", "precisions_",
        "precisions_cholesky_", "quality_", "samples_per_tuple_", "separation_", "sigma_max_",
        "sigma_min_", "tuple_centers_", "weights_")

    def _check_n_clusters(self):
        """Every ``n_components >= 1`` is accepted: one component skips the k-tuple part."""

    def fit_predict(self, X, y=None):
        """Fit, then return ``labels_``: the most likely component of every training row.

        The same as ``fit(X).predict(X)`` after a successful test, and -1
        everywhere after a failed one. The labels are **not** private.

        Returns
        -------
        labels : ndarray of shape (n_samples,)
        """
        return self.fit(X).labels_

    # -- public plan (no randomness) ---------------------------------------------
    def _tuple_clusterer(self, data_radius, share=0.0):
        """The tuple path's clusterer, on ``1 - share`` of the budget."""
        return KTupleClusterer(
            n_clusters=self.n_components, method=self.tuple_method,
            epsilon=(1.0 - share) * self.epsilon, delta=(1.0 - share) * self.delta, beta=self.beta, base_estimator=self.base_estimator,
            n_tuples=self.n_tuples, separation=self.separation, data_radius=data_radius,
            data_center=self.data_center, r_min=self.r_min, n_jobs=self.n_jobs,
            fallback_share=0.0,  # the mixture runs the fallback itself, on the tuple rows
        )

    def _needs_radius(self, data):
        """Every tuple method but ``"noisy_centers"`` uses the bound, and so does one component."""
        return self.tuple_method != "noisy_centers" or self.n_components == 1

    def _plan(self, X):
        n_samples, n_features = X.shape
        if hasattr(X, "map_reduce") and None in (self.sigma_min, self.sigma_max):
            raise ValueError(
                "PrivateGaussianMixture: sigma_min=None or sigma_max=None (bounds computed from "
                "the data, not private) is not supported on Dask input; use 'auto' (derived "
                "privately) or public floats.")
        center = self._resolve_center(n_features)
        radius, unproven = self.data_radius, {}
        if self._needs_radius(X):
            radius, unproven = self._resolve_radius(X, center)
        unproven.update(self._check_sigma_bounds())
        if self.n_components == 1:
            return self._plan_one_component(X, center, radius, unproven)
        auto = self.fallback_share == "auto"
        share = 0.0 if auto else float(self.fallback_share)
        in_share = False
        try:
            clusterer, tuple_plan, n_tuples, samples_per_tuple = self._plan_tuple_part(
                X, radius, share)
            reason = "the private k-tuple test failed"
            in_share = auto and clusterer._method() == "located"
            if auto and not in_share:  # the paper's methods have no share to reuse
                share = AUTO_FALLBACK_SHARE
                clusterer, tuple_plan, n_tuples, samples_per_tuple = self._plan_tuple_part(
                    X, radius, share)
        except InsufficientDataError as error:
            if share == 0.0 and not auto:
                raise
            share, reason = 1.0, str(error)
            clusterer = tuple_plan = None
            n_tuples, samples_per_tuple = 1, self._fallback_rows(n_samples)
        fallback = None
        if share > 0.0:
            fallback = plan_fallback(X[: n_tuples * samples_per_tuple], self.n_components,
                                     share * self.epsilon, share * self.delta,
                                     None if radius is None else float(radius), self.data_center,
                                     self.n_jobs)
        budget = _FreshBudget.for_target(self.epsilon, self.delta)
        attributes = {"n_tuples_": 0 if clusterer is None else n_tuples, "m_": None,
                      "ell_": np.nan, "separation_": np.nan, "located_info_": None,
                      "method_": KTupleClusterer(method=self.tuple_method)._method(),
                      "data_radius_": np.nan if radius is None else radius,
                      **({} if tuple_plan is None else tuple_plan.attributes),
                      "samples_per_tuple_": samples_per_tuple,
                      "n_fresh_": n_samples - n_tuples * samples_per_tuple}
        values = {"clusterer": clusterer, "tuple_plan": tuple_plan, "budget": budget,
                  "fallback": fallback, "fallback_reason": reason, "fallback_share": share,
                  "general_in_share": in_share,
                  "tuple_rows": _tuple_rows(X, clusterer is not None, n_tuples, samples_per_tuple)}
        tuple_cost = (0.0, 0.0) if tuple_plan is None else tuple_plan.cost
        tuple_cost = (tuple_cost[0] + share * self.epsilon, tuple_cost[1] + share * self.delta)
        cost = (max(tuple_cost[0], budget.epsilon), max(tuple_cost[1], budget.delta))
        if self.verbose:
            print(f"[PrivateGaussianMixture] plan: {attributes}, cost={cost}")
        return PrivateFitPlan(cost, values, attributes, unproven)

    def _plan_one_component(self, X, center, radius, unproven):
        """One component: no k-tuple part; the fresh part runs on every row from the bound.

        The refinement pass starts from the public (or privately released)
        centre and radius of the data ball, then the learner
        (:func:`~skdpcluster.averaging.private_gaussian_estimate`) releases the
        mean and covariance: the fresh part's ``(epsilon, delta)`` is the whole fit.
        """
        budget = _FreshBudget.for_target(self.epsilon, self.delta)
        attributes = {"n_tuples_": 0, "m_": None, "ell_": np.nan, "separation_": np.nan,
                      "located_info_": None, "method_": "one_component",
                      "data_radius_": radius, "samples_per_tuple_": 0, "n_fresh_": X.shape[0],
                      "fallback_info_": None}
        values = {"clusterer": None, "tuple_plan": None, "budget": budget, "fallback": None,
                  "one_component": (np.asarray(center, dtype=float)[None, :], float(radius)),
                  "tuple_rows": _tuple_rows(X, False, 0, 0)}
        return PrivateFitPlan((budget.epsilon, budget.delta), values, attributes, unproven)

    def _plan_tuple_part(self, X, radius, share):
        """The tuple path on ``1 - share`` of the budget: clusterer, plan, blocks and their rows."""
        clusterer = self._tuple_clusterer(radius, share)
        n_tuples = clusterer._resolved_n_tuples(int(X.shape[0] * TUPLE_SHARE))
        samples_per_tuple = self._plan_blocks(X.shape[0], n_tuples)
        tuple_plan = clusterer._plan_tuples(n_tuples, X.shape[1])
        clusterer._plan_radius(tuple_plan, X)
        return clusterer, tuple_plan, n_tuples, samples_per_tuple

    def _fallback_rows(self, n_samples):
        """Rows of the fallback when the tuple path cannot run: ``TUPLE_SHARE`` of them, leaving
        at least ``n_components`` fresh rows (else no method can handle the input)."""
        rows = int(n_samples * TUPLE_SHARE)
        if rows < 2 or n_samples - rows < self.n_components:
            raise InsufficientDataError(
                f"X has {n_samples} rows, but PrivateGaussianMixture needs at least "
                f"{2 * max(2, self.n_components)} (half for the centres, at least "
                f"n_components={self.n_components} fresh rows for the components).")
        return rows

    def _plan_blocks(self, n_samples, n_tuples):
        """Rows per block; raise if the blocks and at least k fresh rows do not fit."""
        k = self.n_components
        if self.samples_per_tuple == "auto":
            samples_per_tuple = int(n_samples * TUPLE_SHARE) // n_tuples if n_tuples else 0
            needed = math.ceil(n_tuples * k / TUPLE_SHARE)
        else:
            samples_per_tuple = int(self.samples_per_tuple)
            needed = n_tuples * samples_per_tuple + k
        if samples_per_tuple < k or n_samples - n_tuples * samples_per_tuple < k:
            raise InsufficientDataError(
                f"X has {n_samples} rows, but PrivateGaussianMixture needs at least {needed}: "
                f"n_tuples={n_tuples} blocks of samples_per_tuple >= n_components={k} rows, and "
                f"at least {k} fresh rows (epsilon={self.epsilon}, delta={self.delta}, "
                f"beta={self.beta}, samples_per_tuple={self.samples_per_tuple!r})."
            )
        return samples_per_tuple

    def _check_sigma_bounds(self):
        """Check the learner's bounds; return the plan's ``unproven`` entries of data-derived ones.

        A bound that is ``None`` is computed from the data: its fitted
        attribute (``sigma_min_`` or ``sigma_max_``) is then all ``nan``.
        """
        low, high = self.sigma_min, self.sigma_max
        if isinstance(low, Real) and isinstance(high, Real) and low > high:
            raise ValueError(f"sigma_min={low!r} must not exceed sigma_max={high!r}.")
        if isinstance(high, Real) and not high <= _MAX_NOISE_SCALE:
            # The learner refuses it (its square overflows), but inside the private step after
            # the refinement's noise: a charged failure (review R10 M1).
            raise ValueError(f"sigma_max={high!r} must be at most {_MAX_NOISE_SCALE:g}: the "
                             "learner's covariance, clipped to sigma_max**2, would overflow.")
        if low is not None and high is not None:
            return {}
        reason = (
            "PrivateGaussianMixture: sigma_min or sigma_max is None, so the learner's bounds "
            "are computed from the data; the result is not differentially private with "
            "respect to them. Pass public floats, or 'auto' (derived privately)."
        )
        warn_user(reason, PrivacyLeakWarning)
        return {"sigma_bounds": reason}

    # -- private part ---------------------------------------------------------------
    def _fit_private(self, X, plan, rng):
        split_rng, tuple_rng, ktuple_rng, fresh_rng, fallback_rng = rng.spawn(5)
        tuple_rows, fresh = _split_rows(X, plan.values["tuple_rows"], split_rng)
        radii = None
        if "one_component" in plan.values:
            (centers, radius), status = plan.values["one_component"], None
            found = PrivateFit(centers, True, [], attributes={"quality_": dict(_NO_TEST)})
            radii = np.array([radius])
        else:
            found, status = self._find_centers(tuple_rows, plan, tuple_rng, ktuple_rng,
                                               fallback_rng)
        attributes, fresh_events, refined_only = self._empty_release(), [], []
        if found.success:
            phase("refinement and Gaussian learner on the fresh rows",
                  rows=plan.attributes["n_fresh_"])
            attributes, fresh_events, refined_only = self._fit_fresh(
                fresh, found.centers, plan.values["budget"], fresh_rng, radii)
        attributes.update(tuple_centers_=found.centers, converged_=bool(found.success),
                          labels_=self._training_labels(X, attributes), **found.attributes)
        if refined_only:  # decided from released values: the charge below is the plan's
            status = "fallback"
            attributes["fallback_info_"] = {
                "reason": _LEARNER_FALLBACK_REASON,
                **(attributes.get("fallback_info_") or {}), "learner_fallback": refined_only}
        fresh_event = plan.values["budget"].event(found.success, fresh_events)
        event = _parallel_event(found.events, fresh_event)
        return PrivateFit(None, found.success, [event], proven=found.proven, attributes=attributes,
                          status=status)

    def _find_centers(self, tuple_rows, plan, tuple_rng, ktuple_rng, fallback_rng):
        """Step 3 on the tuple rows: the k-tuple path, then the fallback on its reserved share.

        The tuple rows and the fresh rows are disjoint, so the fallback (on the
        tuple rows only) composes with the k-tuple path, never with the fresh part.
        """
        clusterer, fallback = plan.values["clusterer"], plan.values["fallback"]
        events, found = [], None
        released_signals = {"quality_": dict(_NO_TEST), "located_info_": None}
        if clusterer is not None:
            phase("tuple generation", blocks=plan.attributes["n_tuples_"])
            tuples = generate_tuples_of_rows(
                tuple_rows, clusterer._base_estimator(), self.n_components,
                plan.attributes["n_tuples_"], rng=tuple_rng,
                samples_per_tuple=plan.attributes["samples_per_tuple_"], output="label_means",
                n_jobs=self.n_jobs,
            )
            general_rows = tuple_rows if plan.values["general_in_share"] else None
            found = clusterer._aggregate(tuples, plan.values["tuple_plan"], ktuple_rng,
                                         fallback_rows=general_rows)
            events = list(found.events)
            released_signals = {"quality_": clusterer._test_outcome(found, plan.values["tuple_plan"]),
                                "located_info_": found.attributes.get("located_info_")}
            if found.success or fallback is None:
                if fallback is not None:
                    events.append(unused_share_event(fallback, "PrivateGaussianMixture"))
                info = found.attributes.get("fallback_info_")
                found.events = events
                found.attributes = {"fallback_info_": info, **released_signals}
                return found, found.status
        phase("fallback")
        centers, fallback_events, stable_status, proven = run_fallback(fallback, tuple_rows,
                                                                       fallback_rng)
        info = {"reason": plan.values["fallback_reason"], "share": plan.values["fallback_share"],
                "stable_status": stable_status}
        proven = proven and (found is None or found.proven)
        released = centers is not None
        return (PrivateFit(centers, released, events + fallback_events, proven=proven,
                           attributes={"fallback_info_": info, **released_signals}),
                "fallback" if released else "failure")

    def _training_labels(self, X, released):
        """Most likely component of every training row (not private); -1 after a failure.

        A lazy Dask array for Dask rows.
        """
        parameters = (None if released["means_"] is None else
                      (released["weights_"], released["means_"],
                       released["precisions_cholesky_"], self.covariance_type))
        if hasattr(X, "map_rows"):
            return X.map_rows(_labels_or_none, parameters, dtype=np.intp)
        return _labels_or_none(X, parameters)

    def _warn_after_fit(self):
        """The general method's short grid, and the components the learner could not fit.

        From released attributes only (``fallback_info_``), after the fit.
        """
        warn_if_general_method_short(self, self.n_components)
        refined_only = (getattr(self, "fallback_info_", None) or {}).get("learner_fallback")
        if refined_only:
            warn_user(
                f"PrivateGaussianMixture: at epsilon={self.epsilon!r} and delta={self.delta!r}, "
                f"the released noisy counts and bounds of components {refined_only} would give "
                f"the Gaussian learner a noise scale above {_MAX_NOISE_SCALE:g}, so it did not "
                "run for them (status_='fallback', fallback_info_['learner_fallback']): their "
                "means_ are the refinement pass's centres and their covariances_ are isotropic, "
                "from its private scale, and carry little information. The whole budget was "
                "charged. A larger epsilon and delta, or more rows per component, would help.",
                UtilityWarning)

    def _fallback_message(self):
        """The base class's warning when step 3 fell back; ``None`` when only learners did.

        A k-tuple fallback's ``fallback_info_`` holds its ``"share"``; a
        learner fallback alone is no failed test (no NotSeparatedWarning, and
        ``on_failure="raise"`` does not raise): :meth:`_warn_after_fit` says it.
        """
        if "share" in self.fallback_info_:
            return super()._fallback_message()
        return None

    def _failure_attributes(self, plan):
        """After a failed private step: no parameters (``_FITTED_ATTRIBUTES``), not converged."""
        return {"converged_": False}

    @staticmethod
    def _empty_release():
        names = ("weights_", "means_", "covariances_", "precisions_", "precisions_cholesky_",
                 "sigma_min_", "sigma_max_")
        return dict.fromkeys(names)

    def _fit_fresh(self, fresh, centers, budget, rng, radii=None):
        """Steps 4-6 on the fresh rows, given the private centres; returns attributes and events.

        ``radii``: the refinement pass's first clipping radii (public or released); ``None``
        uses half the gap to the nearest other centre. ``fresh`` is an array or Dask rows:
        then every statistic is one map-reduce (two passes for the counts, and per
        component ``2 * REFINE_ROUNDS`` for the refinement and one per learner step, in
        the order of the in-memory noise draws).
        """
        k = self.n_components
        points, exact = _components(fresh, centers)
        counts, count_event = _noisy_counts(exact, k, budget.rho_refine, rng, "refine")
        if radii is None:
            radii = np.maximum(nearest_gaps(centers) / 2.0, np.finfo(float).tiny)
        refined, events = [], [count_event]
        for j in range(k):
            *result, refine_events = _refine_component(points[j], max(counts[j], 1.0),
                                                       centers[j], radii[j], budget.rho_refine, rng)
            refined.append(result)
            events += refine_events
        points, exact = _components(fresh, np.array([r[0] for r in refined]))
        counts, count_event = _noisy_counts(exact, k, budget.rho_learner, rng, "learner")
        events.append(count_event)
        estimates = [self._learn_component(points[j], counts[j], *refined[j],
                                           budget.rho_learner, rng) for j in range(k)]
        events += [estimate[-1] for estimate in estimates if estimate[-1] is not None]
        refined_only = [j for j, estimate in enumerate(estimates) if estimate[-1] is None]
        return self._release(estimates, counts), events, refined_only

    def _learn_component(self, points, count, center, radius, scale, rho, rng):
        """The learner's mean, covariance, bounds and event for one component.

        Where the learner's pre-draw check would refuse the released count
        and bounds (:func:`~skdpcluster.averaging.gaussian._learner_accepts`:
        a noise scale above 1e152, at tiny budgets), that component's
        release is :func:`_refined_estimate` instead, with event ``None``: a
        decision from released values, drawing no noise, whose fit is
        charged its plan as any other (review R11 M2: the learner's
        ValueError was a charged failure).
        """
        sigma_min, sigma_max = self._component_sigmas(points, scale)
        n_public = max(count, 1.0)
        if not _learner_accepts(points.shape[1], n_public, radius, sigma_min, sigma_max, rho,
                                *LEARNER_ITERATIONS):
            return (*_refined_estimate(center, scale, sigma_min, sigma_max), None)
        mean, covariance, event = private_gaussian_estimate(
            points, n_public=n_public, center=center, radius=radius, sigma_min=sigma_min,
            sigma_max=sigma_max, rho=rho, rng=rng, n_iter_mean=LEARNER_ITERATIONS[0],
            n_iter_cov=LEARNER_ITERATIONS[1],
        )
        return mean, covariance, sigma_min, sigma_max, event

    def _component_sigmas(self, points, scale):
        """(sigma_min, sigma_max) of one component: floats, "auto" (private) or None (data)."""
        auto = _auto_sigmas(scale, points.shape[1])
        data = _empirical_sigmas(points) if None in (self.sigma_min, self.sigma_max) else None
        data = auto if data is None else (data[0] / DATA_SIGMA_MARGIN, data[1] * DATA_SIGMA_MARGIN)
        low, high = ({"auto": a, None: e}.get(value, value)
                     for value, a, e in zip((self.sigma_min, self.sigma_max), auto, data))
        high = max(high, SIGMA_FLOOR)
        if isinstance(self.sigma_min, Real):  # a public float bound wins over derived ones
            high = max(high, low)
        low = min(max(low, high * MIN_SIGMA_RATIO, SIGMA_FLOOR), high)
        return float(low), float(high)

    def _release(self, estimates, counts):
        """Released parameters in scikit-learn's formats (post-processing only)."""
        columns = list(zip(*estimates))[:4]  # the events are recorded elsewhere
        means, full, sigma_min, sigma_max = (np.array(column) for column in columns)
        # A bound computed from the data (parameter None) is used, never stored.
        sigma_min, sigma_max = (np.full_like(bounds, np.nan) if parameter is None else bounds
                                for parameter, bounds in ((self.sigma_min, sigma_min),
                                                          (self.sigma_max, sigma_max)))
        weights = np.maximum(counts, 1.0) / np.maximum(counts, 1.0).sum()
        full = full + self.reg_covar * np.eye(means.shape[1])
        covariances = _covariances_of_type(full, weights, self.covariance_type)
        cholesky = _precisions_cholesky(covariances, self.covariance_type)
        return {
            "weights_": weights, "means_": means, "covariances_": covariances,
            "precisions_cholesky_": cholesky,
            "precisions_": (cholesky @ np.swapaxes(cholesky, -1, -2)
                            if self.covariance_type in ("full", "tied") else cholesky**2),
            "sigma_min_": sigma_min, "sigma_max_": sigma_max,
        }

    # -- prediction and density ---------------------------------------------------------
    def _check_released(self):
        check_is_fitted(self, "status_")
        if self.means_ is None:
            raise NotFittedError(
                "PrivateGaussianMixture released no parameters: its private k-tuple test failed "
                "(status_='failure'). Fit on better separated or more data."
            )

    def _log_prob_statistic(self, X, statistic):
        """A ``statistic`` of :data:`_STATISTICS` of every row of ``X``; lazy for a Dask ``X``."""
        self._check_released()
        parameters = (self.weights_, self.means_, self.precisions_cholesky_, self.covariance_type)
        if is_dask_collection(X):
            X = check_dask_predict_input(X, self)
            if statistic == "predict_proba":
                layout = {"chunks": (X.chunks[0], (self.n_components,))}
            else:
                layout = {"drop_axis": 1}
            dtype = np.intp if statistic == "predict" else np.float64
            return X.map_blocks(_statistic_of_rows, parameters, statistic, dtype=dtype, **layout)
        X = validate_data(self, X, dtype=[np.float64, np.float32], reset=False)
        return _statistic_of_rows(X, parameters, statistic)

    def score_samples(self, X):
        """Log-likelihood of every row under the released mixture.

        Parameters
        ----------
        X : array-like or dask.array.Array of shape (n_samples, n_features)

        Returns
        -------
        log_prob : ndarray of shape (n_samples,)
            A lazy Dask array (``map_blocks``) for a Dask input.
        """
        return self._log_prob_statistic(X, "score_samples")

    def score(self, X, y=None):
        """Mean log-likelihood of ``X`` under the released mixture (higher is better).

        Parameters
        ----------
        X : array-like or dask.array.Array of shape (n_samples, n_features)
        y : Ignored

        Returns
        -------
        log_likelihood : float
        """
        return float(np.mean(self.score_samples(X)))

    def predict_proba(self, X):
        """Posterior probability of every component for every row.

        Parameters
        ----------
        X : array-like or dask.array.Array of shape (n_samples, n_features)

        Returns
        -------
        resp : ndarray of shape (n_samples, n_components)
            A lazy Dask array (``map_blocks``) for a Dask input.
        """
        return self._log_prob_statistic(X, "predict_proba")

    def predict(self, X):
        """Most likely component of every row under the released mixture.

        Parameters
        ----------
        X : array-like or dask.array.Array of shape (n_samples, n_features)

        Returns
        -------
        labels : ndarray of shape (n_samples,)
            A lazy Dask array (``map_blocks``) for a Dask input.
        """
        return self._log_prob_statistic(X, "predict")

    def sample(self, n_samples=1):
        """Draw rows from the released mixture (post-processing: no privacy cost).

        Uses ``random_state`` (an int gives the same rows on every call, as in
        scikit-learn; ``None`` fresh OS entropy).

        Parameters
        ----------
        n_samples : int, default=1

        Returns
        -------
        X : ndarray of shape (n_samples, n_features)
        y : ndarray of shape (n_samples,)
            The component of every row, in non-decreasing order.
        """
        self._check_released()
        if isinstance(n_samples, bool) or not isinstance(n_samples, Integral) or n_samples < 1:
            raise ValueError(f"n_samples must be an integer >= 1, got n_samples={n_samples!r}.")
        rng = check_random_state(self.random_state)
        k, d = self.means_.shape
        sizes = rng.multinomial(n_samples, self.weights_)
        # Lower Cholesky factors L (Sigma = L L^T): a row z L^T has covariance Sigma.
        factors = np.linalg.cholesky(_as_full(self.covariances_, self.covariance_type, k, d))
        X = np.concatenate([self.means_[j] + rng.standard_normal((size, d)) @ factors[j].T
                            for j, size in enumerate(sizes)])
        return X, np.repeat(np.arange(k), sizes)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        return tags
