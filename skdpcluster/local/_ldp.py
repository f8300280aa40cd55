r"""Local-model building blocks (Shechner 2021, Section 6; ``spec/shechner_stable.md`` §5, §9.8).

In the local model every user randomizes its own row and sends one report
to an untrusted server; a protocol is :math:`(\varepsilon, \delta)`-LDP
(thesis Definition 6.1) when the report of one user, alone, is
:math:`(\varepsilon, \delta)`-DP with respect to that user's input. This
module holds the two halves a deployment needs:

* :func:`user_randomizer` runs on the device: one row and a public round
  description in, one report (a float vector) out;
* :func:`server_aggregate` runs on the server: the reports of a round in,
  its estimate out;

and the round descriptions they share: :class:`AverageRound` (protocol
LDP-AVG, thesis Theorem 6.3 and Claim 6.4, over :class:`GridRegions` or
:class:`BallRegions`) and :class:`CostRound` (a noisy sum of bounded
scalars, Theorem 6.3 in one dimension). The frequency oracle of Theorem 6.2
is :func:`frequency_estimates`, over reports of
:func:`~skdpcluster.mechanisms.randomized_response`.

Every random draw of a report goes through :mod:`skdpcluster.mechanisms`.
"""

import math
from dataclasses import dataclass
from numbers import Real

import numpy as np

from skdpcluster.averaging._common import project_into_ball
from skdpcluster.cluster._stable_init import (
    CHUNK_ROWS,
    cell_indices,
    fixed_order_sq_distances,
    nearest_centers,
    within_radii,
)
from skdpcluster.mechanisms import (
    _check_rr_resolution,
    _rr_keep_probability,
    gaussian_mechanism,
    gaussian_sigma,
    randomized_response,
)

__all__ = [
    "AverageRound",
    "BallRegions",
    "CostRound",
    "GridRegions",
    "frequency_error_bound",
    "frequency_estimates",
    "server_aggregate",
    "user_randomizer",
]

#: L2 sensitivity of one user's LDP-AVG block vector: the user's vector ``z`` (norm <= 1)
#: sits in one block; another input moves it inside the block (change <= 2) or to
#: another block (change sqrt(1 + 1)), or removes it (change 1). Spec §5.2.
BLOCK_SENSITIVITY = 2.0
#: L2 sensitivity of a selection report, in units of tau: the clipped cost gap lies in
#: [-tau, tau], so two inputs of one user move it by at most 2 tau.
COST_SENSITIVITY_FACTOR = 2.0
#: Share of a user's epsilon spent on the Gaussian block vector in LDP-AVG; the rest
#: goes to the frequency-oracle report of the region index (thesis protocol LDP-AVG).
AVERAGE_GAUSSIAN_SHARE = 0.5
#: Fewest reports :func:`simulate_round` randomizes in one batch.
MIN_BATCH_REPORTS = 64
#: Public cap on the floats of one LDP-AVG report (``n_regions * n_features + 1``): a batch of
#: :data:`MIN_BATCH_REPORTS` such reports is then at most 2**24 floats (128 MiB per copy).
#: A larger round is refused before any randomness (audit RB-03).
MAX_REPORT_FLOATS = 2**18


# ---------------------------------------------------------------------------
# Frequency oracle (Theorem 6.2)
# ---------------------------------------------------------------------------


def _rr_probabilities(n_values, epsilon):
    """(p, q): probability of reporting the truth, and each other value."""
    keep = _rr_keep_probability(epsilon, n_values)
    return keep, (1.0 - keep) / (n_values - 1)


def frequency_estimates(histogram, n_reports, *, n_values, epsilon):
    r"""Unbiased multiplicities from a histogram of randomized-response reports (Theorem 6.2).

    With :math:`c_u` reports of value :math:`u` among :math:`n` reports,
    :math:`E[c_u] = f(u)p + (n - f(u))q`, so
    :math:`\hat f(u) = (c_u - nq)/(p - q)` is unbiased. Post-processing of
    the reports: no privacy cost.

    Parameters
    ----------
    histogram : ndarray of shape (n_values,)
        Number of reports of every value.
    n_reports : int
        n, the number of reports (public).
    n_values : int
    epsilon : float
        The epsilon the reports were randomized with.

    Returns
    -------
    ndarray of shape (n_values,)
    """
    p, q = _rr_probabilities(n_values, epsilon)
    return (np.asarray(histogram, dtype=float) - n_reports * q) / (p - q)


def frequency_error_bound(n_reports, *, n_values, epsilon, beta):
    r"""Simultaneous error bound of :func:`frequency_estimates`, with probability >= 1 - beta.

    Each :math:`c_u` is a sum of n independent indicators, so by Hoeffding's
    inequality and a union bound over the m values,

    .. math::

        \max_u |\hat f(u) - f(u)| \le \frac{\sqrt{n\ln(2m/\beta)/2}}{p - q}.

    For m = 2 this is about :math:`(1.41/\varepsilon)\sqrt{n\ln(4/\beta)}`,
    below the :math:`(3/\varepsilon)\sqrt{n\log(4/\beta)}` of Theorem 6.2;
    unlike the heavy-hitter oracles behind that theorem, randomized
    response's error grows with m (about :math:`m/\varepsilon` for
    :math:`\varepsilon < 1`), which is fine for the few regions used here.
    """
    p, q = _rr_probabilities(n_values, epsilon)
    return math.sqrt(n_reports * math.log(2.0 * n_values / beta) / 2.0) / (p - q)


def _frequency_noise_scale(n_reports, n_values, epsilon):
    """Largest standard deviation of one :math:`\\hat f(u)` (public: n is the number of reports)."""
    p, q = _rr_probabilities(n_values, epsilon)
    return math.sqrt(n_reports * max(p * (1 - p), q * (1 - q))) / (p - q)


# ---------------------------------------------------------------------------
# Public regions
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class GridRegions:
    """A public grid of ``grid_size**p`` cells over the projection ``x @ projection``.

    Rows are taken relative to the data centre and inside B(0, Lambda); a
    row's vector is ``x / Lambda``. The columns of ``projection`` are
    orthonormal (the rounding bound behind a row's cell assumes unit norms).
    """

    projection: np.ndarray
    grid_size: int
    data_radius: float

    @property
    def n_regions(self):
        return self.grid_size ** self.projection.shape[1]

    def locate(self, X):
        """Region index of every row and its vector of exact norm <= 1.

        **Both are functions of the row alone**, as a user's report must be:
        the cell is that of the row's projection computed coordinate by
        coordinate in a fixed order, whatever block of rows the projection
        is computed in (:func:`~skdpcluster.cluster._stable_init.cell_indices`
        without a shift: the matrix product's cell where every coordinate is
        clear of a cell boundary, else the fixed-order one), and the vector
        is ``x / Lambda`` projected into the unit ball
        (:func:`~skdpcluster.averaging._common.project_into_ball`: the
        division's rounding may leave it a few units in the last place
        outside, and the sensitivity of the block vector assumes norm <= 1).
        """
        index = cell_indices(X, self.projection, self.grid_size, self.data_radius, None)
        vectors = X / self.data_radius
        project_into_ball(vectors, 1.0)
        return index, vectors


@dataclass(frozen=True)
class BallRegions:
    """The public balls :math:`R_i = B(c_i, r_i)` (thesis LDP-Stable-k-Means step 3).

    The balls must be disjoint (radii below half the gaps); rows in no ball
    get the index ``n_regions`` (the implicit (k+1)-th region) and the zero
    vector. A row of ball i has the vector :math:`(x - c_i)/r_i`.
    """

    centers: np.ndarray
    radii: np.ndarray

    @property
    def n_regions(self):
        return len(self.centers)

    def locate(self, X):
        r"""Region index of every row (``n_regions`` outside) and its vector of exact norm <= 1.

        **Both are functions of the row alone**, as a user's report must be:
        the nearest centre is :func:`~skdpcluster.cluster._stable_init.nearest_centers`'
        row-exact label, and "inside its ball" is the decision of the row's
        fixed-order squared distance :math:`F \le r_i^2`
        (:func:`~skdpcluster.cluster._stable_init.within_radii`), not of the
        matrix product's value, whose rounding depends on the block the row
        is computed in (review R7, B). The vector is projected into the unit
        ball (:func:`~skdpcluster.averaging._common.project_into_ball`): a
        row with :math:`F \le r_i^2` may be a few units in the last place
        outside, and the sensitivity of the block vector assumes norm <= 1.
        """
        sq_norms = np.einsum("ij,ij->i", X, X)
        labels, sq_distances = nearest_centers(X, self.centers, sq_norms)
        radii = self.radii[labels]
        inside = (radii > 0) & within_radii(X, self.centers, labels, sq_distances, radii**2,
                                            sq_norms)
        vectors = np.where(inside[:, None],
                           (X - self.centers[labels]) / np.where(radii > 0, radii, 1.0)[:, None],
                           0.0)
        project_into_ball(vectors, 1.0)
        return np.where(inside, labels, self.n_regions), vectors


# ---------------------------------------------------------------------------
# Rounds
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class AverageRound:
    r"""Public description of one LDP-AVG round (thesis protocol LDP-AVG, Claim 6.4).

    A user with row x (clipped by itself to :math:`B(\mu, \Lambda)`) in
    region t with vector z sends

    * the block vector :math:`y \in \mathbb{R}^{T\times d}`, zero but for
      block t equal to z, plus i.i.d. :math:`N(0, \sigma^2)` on every entry,
      with :math:`\sigma` the analytic Gaussian calibration (Balle & Wang
      2018) of L2 sensitivity 2 at :math:`(\varepsilon/2, \delta)`;
    * t through randomized response over the T + 1 regions (the last one
      is "outside") at :math:`\varepsilon/2`.

    By basic composition one report is :math:`(\varepsilon, \delta)`-DP in
    the user's input. (The thesis' :math:`\sigma = (8\Lambda/\varepsilon)
    \sqrt{\ln(1.25/\delta)}` is replaced by the exact calibration of the
    same mechanism, spec §5.2.)

    Attributes
    ----------
    name : str
    regions : GridRegions or BallRegions
    epsilon, delta : float
        One user's guarantee.
    data_center : ndarray of shape (n_features,)
    data_radius : float
    """

    name: str
    regions: object
    epsilon: float
    delta: float
    data_center: np.ndarray
    data_radius: float

    @property
    def sigma(self):
        """Noise std of every entry of a block vector."""
        return gaussian_sigma(BLOCK_SENSITIVITY, AVERAGE_GAUSSIAN_SHARE * self.epsilon,
                              self.delta)

    @property
    def oracle_epsilon(self):
        return (1.0 - AVERAGE_GAUSSIAN_SHARE) * self.epsilon


@dataclass(frozen=True)
class CostRound:
    r"""Public description of a selection round: a noisy sum of bounded cost differences.

    A user with row x sends :math:`\mathrm{clip}_{[-\tau,\tau]}(\min_{c\in C}
    \|x-c\|^2 - \min_{b\in B}\|x-b\|^2) + N(0, \sigma^2)`, :math:`\sigma`
    calibrated to sensitivity :math:`2\tau` at :math:`(\varepsilon,\delta)`
    (Theorem 6.3 in one dimension; thesis LDP-Stable-k-Means step 5). The
    server sums the reports: a negative total favours ``candidate``.
    """

    name: str
    candidate: np.ndarray
    reference: np.ndarray
    tau: float
    epsilon: float
    delta: float
    data_center: np.ndarray
    data_radius: float

    @property
    def sigma(self):
        return gaussian_sigma(COST_SENSITIVITY_FACTOR * self.tau, self.epsilon, self.delta)


@dataclass(frozen=True)
class AverageEstimate:
    """What the server learns from an LDP-AVG round.

    ``sums[t]`` estimates the sum of the vectors of region t and
    ``counts[t]`` its number of users (the frequency oracle);
    ``sigma_sum`` and ``sigma_count`` are the noise standard deviations of
    one coordinate of a sum and of a count (public: they depend on the
    number of reports only).
    """

    sums: np.ndarray
    counts: np.ndarray
    sigma_sum: float
    sigma_count: float
    n_reports: int


@dataclass(frozen=True)
class CostEstimate:
    """The noisy total of a selection round and its noise std."""

    total: float
    sigma: float
    n_reports: int


def _clip_rows(X, public_round):
    """Every user's own projection of its row onto :math:`B(\\mu, \\Lambda)`, relative to mu.

    Each row minus mu goes through
    :func:`~skdpcluster.averaging._common.project_into_ball`, a function of the
    row alone: its exact norm is at most Lambda (the rounding bound behind a
    :class:`GridRegions` cell assumes it).
    """
    rows = np.subtract(np.atleast_2d(X), public_round.data_center, dtype=float)
    project_into_ball(rows, public_round.data_radius)
    return rows


def _own_cost(X, centers):
    """Every row's squared distance to its nearest centre, a function of the row alone.

    The fixed-order distance (:func:`~skdpcluster.cluster._stable_init.fixed_order_sq_distances`)
    to the row-exact nearest centre: the matrix product's value depended on the
    rows simulated beside it (by up to 6.8e-16 tau; review R8), which a user's
    own device does not see.
    """
    return fixed_order_sq_distances(X, centers, nearest_centers(X, centers)[0])


def _randomize_rows(X, public_round, rng):
    """One report per row (each row randomized by its own user) and the events of one report."""
    X = _clip_rows(X, public_round)
    if isinstance(public_round, CostRound):
        gap = _own_cost(X, public_round.candidate) - _own_cost(X, public_round.reference)
        value = np.clip(gap, -public_round.tau, public_round.tau)
        noisy, event = gaussian_mechanism(
            value, sensitivity=COST_SENSITIVITY_FACTOR * public_round.tau,
            epsilon=public_round.epsilon, delta=public_round.delta, rng=rng, label=f"local/{public_round.name}/cost_gap")
        return np.reshape(noisy, (-1, 1)), [event]
    regions = public_round.regions
    index, vectors = regions.locate(X)
    blocks = np.zeros((len(X), regions.n_regions + 1, X.shape[1]))
    blocks[np.arange(len(X)), index] = vectors
    blocks = blocks[:, :regions.n_regions].reshape(len(X), regions.n_regions * X.shape[1])
    noisy, vector_event = gaussian_mechanism(
        blocks, sensitivity=BLOCK_SENSITIVITY, epsilon=AVERAGE_GAUSSIAN_SHARE
        * public_round.epsilon, delta=public_round.delta, rng=rng,
        label=f"local/{public_round.name}/block_vector")
    reported, index_event = randomized_response(
        index, n_values=regions.n_regions + 1, epsilon=public_round.oracle_epsilon, rng=rng,
        label=f"local/{public_round.name}/region_index")
    return np.column_stack([np.reshape(noisy, blocks.shape), reported]), [vector_event,
                                                                          index_event]


def user_randomizer(x, public_round, rng, *, max_epsilon=None, max_delta=None):
    r"""The device half: one user's report for one round.

    The guarantee is **per report**: one report is (``epsilon``,
    ``delta``)-DP in ``x``, with the values the server put in
    ``public_round``. In the local model the server is the adversary
    (thesis Definition 6.1), so a device should pin its own budget with
    ``max_epsilon``/``max_delta`` and answer **one round only**: two reports
    of one row compose (basic composition, 2 epsilon).

    Parameters
    ----------
    x : array-like of shape (n_features,)
        The user's row (raw coordinates; the user clips it to the public
        ball itself).
    public_round : AverageRound or CostRound
        The public round description sent by the server.
    rng : numpy.random.Generator
        The user's own randomness.
    max_epsilon, max_delta : float, default=None
        The device's own cap on the round's ``epsilon`` (> 0) and ``delta``
        (in [0, 1)); a round asking more is refused with a ValueError before
        any randomness (audit RB-07). ``None``: no cap (the simulation's
        use, where the rounds are built by the estimator itself).

    Returns
    -------
    report : ndarray of shape (report_size,)
        :class:`AverageRound`: the noisy block vector (``n_regions *
        n_features`` floats) followed by the randomized region index;
        :class:`CostRound`: one float. The report alone is
        (``epsilon``, ``delta``)-DP in ``x``.
    """
    _check_device_caps(public_round, max_epsilon, max_delta)
    if isinstance(public_round, AverageRound):  # refused before the block vector's noise
        _check_rr_resolution(public_round.oracle_epsilon, public_round.regions.n_regions + 1)
    x = np.asarray(x, dtype=float)
    if x.ndim != 1 or x.shape != np.shape(public_round.data_center) or not np.all(np.isfinite(x)):
        raise ValueError(
            f"x must be one finite row of {np.size(public_round.data_center)} features, got "
            f"shape {x.shape}.")
    return _randomize_rows(x[None, :], public_round, rng)[0][0]


def _check_device_caps(public_round, max_epsilon, max_delta):
    """Refuse a round whose epsilon or delta is above the device's cap, before any randomness."""
    if max_epsilon is not None and not (_is_number(max_epsilon) and max_epsilon > 0):
        raise ValueError(f"max_epsilon must be a number > 0 (or None), got max_epsilon="
                         f"{max_epsilon!r}.")
    if max_delta is not None and not (_is_number(max_delta) and 0 <= max_delta < 1):
        raise ValueError(f"max_delta must be a number in [0, 1) (or None), got max_delta="
                         f"{max_delta!r}.")
    for parameter, cap in (("epsilon", max_epsilon), ("delta", max_delta)):
        asked = getattr(public_round, parameter)
        if cap is not None and not (_is_number(asked) and asked <= cap):
            raise ValueError(
                f"the round {public_round.name!r} asks {parameter}={asked!r}, above this "
                f"device's max_{parameter}={cap!r}: the device refuses to answer it (the server "
                f"sets a round's {parameter}, the device caps it).")


def _is_number(value):
    return isinstance(value, Real) and not isinstance(value, bool)


def _report_totals(reports, public_round):
    """Additive summary of a batch of reports: (vector sum, index histogram, count)."""
    reports = np.atleast_2d(np.asarray(reports, dtype=float))
    if isinstance(public_round, CostRound):
        return reports[:, 0].sum(), None, len(reports)
    n_regions = public_round.regions.n_regions
    histogram = np.bincount(reports[:, -1].astype(np.intp), minlength=n_regions + 1)
    return reports[:, :-1].sum(axis=0), histogram, len(reports)


def _merge_totals(totals):
    vector = sum(t[0] for t in totals)
    histograms = [t[1] for t in totals if t[1] is not None]
    return vector, (sum(histograms) if histograms else None), sum(t[2] for t in totals)


def _estimate(totals, public_round):
    """The server's estimate from the merged totals of a round."""
    vector, histogram, n_reports = totals
    sigma = public_round.sigma
    if isinstance(public_round, CostRound):
        return CostEstimate(float(vector), sigma * math.sqrt(n_reports), n_reports)
    n_regions = public_round.regions.n_regions
    n_features = np.size(public_round.data_center)
    epsilon = public_round.oracle_epsilon
    counts = frequency_estimates(histogram, n_reports, n_values=n_regions + 1, epsilon=epsilon)
    return AverageEstimate(
        np.reshape(vector, (n_regions, n_features)), counts[:n_regions],
        sigma * math.sqrt(n_reports), _frequency_noise_scale(n_reports, n_regions + 1, epsilon),
        n_reports)


def server_aggregate(reports, public_round):
    r"""The server half: the estimate of one round from its users' reports.

    Post-processing of the reports (no privacy cost). For an
    :class:`AverageRound`, the block vectors are summed (Theorem 6.3) and
    the region indices go through the frequency oracle
    (:func:`frequency_estimates`); the average of region t is then
    ``sums[t] / counts[t]`` (protocol LDP-AVG step 3).

    Parameters
    ----------
    reports : array-like of shape (n_reports, report_size)
        Outputs of :func:`user_randomizer` for this round.
    public_round : AverageRound or CostRound

    Returns
    -------
    AverageEstimate or CostEstimate

    Raises
    ------
    ValueError
        When a report is not one :func:`user_randomizer` output of this
        round: wrong number of columns, a non-finite value, or a region index
        that is not an integer in [0, ``n_regions``].
    """
    reports = _checked_reports(reports, public_round)
    return _estimate(_report_totals(reports, public_round), public_round)


def _checked_reports(reports, public_round):
    """The reports as a float array, refused with a ValueError unless well formed (audit RB-07).

    One row of :func:`_report_size` finite floats per report; for an
    :class:`AverageRound`, the last column is a region index, an integer in
    [0, n_regions] (NumPy's ``bincount`` would reject a negative one with its
    own message, drop one above n_regions and truncate a fraction).
    """
    reports = np.asarray(reports, dtype=float)
    if reports.ndim != 2 or not np.all(np.isfinite(reports)):
        raise ValueError("reports must be a finite 2-d array, one report per row.")
    size = _report_size(public_round, np.size(public_round.data_center))
    if reports.shape[1] != size:
        raise ValueError(
            f"reports must have shape (n_reports, {size}) for the round {public_round.name!r} "
            f"(one user_randomizer output per row), got shape {reports.shape}.")
    if isinstance(public_round, AverageRound):
        index, n_regions = reports[:, -1], public_round.regions.n_regions
        bad = np.flatnonzero((index != np.floor(index)) | (index < 0) | (index > n_regions))
        if bad.size:
            raise ValueError(
                f"reports: the last column is a region index, an integer in [0, {n_regions}], "
                f"but {bad.size} reports hold another value (the first, row {bad[0]}: "
                f"{float(index[bad[0]])!r}).")
    return reports


def simulate_round(X, public_round, rng):
    """Every row randomized by its own user, in blocks; the estimate and one report's events.

    Equal in distribution to ``server_aggregate`` of the ``user_randomizer``
    reports of all rows, without holding all reports in memory. A round
    with no users still yields its (empty) estimate.
    """
    chunk = max(MIN_BATCH_REPORTS,
                min(CHUNK_ROWS, 2**22 // _report_size(public_round, X.shape[1])))
    totals = []
    for start in range(0, max(len(X), 1), chunk):
        reports, events = _randomize_rows(X[start:start + chunk], public_round, rng)
        totals.append(_report_totals(reports, public_round))
    return _estimate(_merge_totals(totals), public_round), events


def _report_size(public_round, n_features):
    if isinstance(public_round, CostRound):
        return 1
    return average_report_size(public_round.regions.n_regions, n_features)


def average_report_size(n_regions, n_features):
    """Floats of one LDP-AVG report: the block vector and the region index (public)."""
    return n_regions * n_features + 1
