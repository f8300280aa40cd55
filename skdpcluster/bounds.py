r"""Private estimation of a centre and a radius: the public bound the estimators need.

Every mechanism of this library needs a public bound: a centre :math:`c` and a
radius :math:`\Lambda` with the rows in :math:`B(c, \Lambda)` (rows outside are
projected onto the ball). :func:`private_bounds` releases such a bound with a
small share of the budget, so that ``Est().fit(X)`` with the default
``data_radius=None`` stays differentially private.

Algorithm (a private median, then a private quantile, both the exponential
mechanism of McSherry & Talwar (2007) with a rank score):

1. **Centre.** For each coordinate :math:`j`, the exponential mechanism over
   the public grid :math:`G_c = \{0\} \cup \{\pm r_{lo} g_c^i\}` (geometric,
   :math:`g_c = 1.01`, from :math:`r_{lo}` to :math:`r_{hi}`) with score

   .. math::

       u_j(t) = \min\left(\#\{i : x_{ij} < t^+\},\ \#\{i : x_{ij} > t^-\}\right),

   where :math:`t^-, t^+` are the grid neighbours of :math:`t` (the
   interior-point quality of Cohen et al. 2021, App. A.1.2, with the values
   rounded to the grid): a private coordinate-wise median, whose score is
   :math:`n` around a point mass. Skipped when a public centre is given.
2. **Radius.** With the released centre :math:`\hat c` and
   :math:`d_i = \|x_i - \hat c\|`, the exponential mechanism over the public
   geometric grid :math:`G_r = \{r_{lo} g_r^i\}` (:math:`g_r = 1.01`) with
   score :math:`u(R) = -|\#\{i : d_i \le R\} - q n|`, where the public
   quantile :math:`q = q(n)` is 0.99, lowered for few rows so that a radius
   above every row is unlikely (:func:`radius_quantile`), and the
   data-independent base measure :math:`\propto 1/R` (it breaks ties towards the smallest
   radius, so data on one point gives a tiny radius, never a huge one); the
   release is :math:`\Lambda = s \cdot R` with a safety factor :math:`s`.

**Privacy.** Replacing, adding or removing one row changes every count, and
so the median score, by at most 1. For the radius, replacing one row changes
every count by at most 1 and leaves :math:`n` unchanged; adding (removing)
one changes the count by 0 or 1 and the target :math:`q(n)\,n`, which is
non-decreasing and 1-Lipschitz in :math:`n`, by at most 1 in the same
direction, so :math:`|u(t) - u'(t)| \le 1`.
Each score has sensitivity 1 under both relations, and each exponential
mechanism is :math:`\varepsilon`-DP. The :math:`d` coordinates of the centre
compose either by basic composition (:math:`\varepsilon_c / d` each) or,
whichever gives each coordinate more budget, in zCDP: an
:math:`\varepsilon`-DP exponential mechanism is :math:`\varepsilon`-bounded
range, hence :math:`\varepsilon^2/8`-zCDP (Cesar & Rogers 2021, Lemma 3.2),
:math:`d` of them are :math:`d\varepsilon^2/8`-zCDP (Bun & Steinke 2016,
Lemma 2.3), converted at :math:`\delta_c` by Proposition 1.3 there. The
radius is computed from the released centre (adaptive composition), so the
whole estimate is :math:`(\varepsilon_c + \varepsilon_r, \delta_c)`-DP, where
:math:`\delta_c` is the share's delta when the centre composes in zCDP and 0
otherwise (the radius is pure): :meth:`BoundsBudget.of_fit` then reserves no
delta and the fit keeps all of it. The
grids, ``quantile`` and the safety factor are public; nothing raises after
randomness is drawn.

**Failure modes** (documented in ``doc/privacy.rst``, measured there):
too few rows for the share (rank error :math:`\approx (2/\varepsilon)\log(|G|/\beta)`
rows), heavy tails (the quantile radius clips more than :math:`1 - q` of the
rows, the tails are projected onto the ball), a centre far from the origin
(the geometric grid has relative resolution 1%, so the radius grows by about
1% of :math:`\|c\|`), and data beyond :math:`r_{hi}`. A warning computed
from public or released values says when the release sits at the end of a
grid or the data is too small for the share.
"""

import math
from dataclasses import dataclass

import numpy as np

from skdpcluster.averaging import _check_generator, _check_points
from skdpcluster.averaging._common import _check_choice
from skdpcluster.mechanisms import PrivacyEvent, exponential_mechanism, zcdp_rho_for_dp
from skdpcluster.utils._data import as_rows
from skdpcluster.utils._errstate import quiet_floating_point
from skdpcluster.utils._threads import fit_threads, ordered_map
from skdpcluster.utils._validation import check_epsilon_delta, check_probability
from skdpcluster.utils._warnings import warn_user

__all__ = ["BOUNDS_SHARE", "BoundsBudget", "plan_bounds", "private_bounds", "radius_quantile"]

#: Share of a fit's (epsilon, delta) that an estimator with ``data_radius=None`` spends on the bound.
BOUNDS_SHARE = 0.1
#: Share of the bound's epsilon (and all its delta) spent on the centre when it is estimated.
CENTER_SHARE = 0.5
#: Public range of the grids: centres and radii between ``GRID_RANGE[0]`` and ``GRID_RANGE[1]``.
GRID_RANGE = (1e-6, 1e9)
_CENTER_RATIO = 1.01
_RADIUS_RATIO = 1.01
#: Multiplies the released quantile radius (public).
RADIUS_SAFETY = 1.1
#: A released radius below ``max(10 r_lo, 2% of |centre|)`` is at the grids' resolution.
_TINY_RADIUS = 10.0
_CENTER_RESOLUTION = 0.02
#: Confidence level of the rank error stated in warnings (utility only).
_BETA = 0.05
#: Rows per block of the distances to the centre: no copy of all the rows is made.
_BLOCK_ROWS = 8192
#: Rows per part whose distances are sorted and counted together (:func:`_distance_rank_counts`):
#: a multiple of ``_BLOCK_ROWS``; the parts run on the fit's threads.
_SORT_ROWS = 32 * _BLOCK_ROWS


@dataclass(frozen=True)
class BoundsBudget:
    """The named split of a bound estimate: (epsilon, delta) of the centre, epsilon of the radius."""

    epsilon_center: float
    delta_center: float
    epsilon_radius: float

    @classmethod
    def of_fit(cls, epsilon, delta, *, estimate_center, share=BOUNDS_SHARE, n_features=None):
        """The share of a fit's (epsilon, delta) spent on its bound (public values only).

        The radius is pure epsilon-DP, and so is the centre when basic
        composition gives each coordinate more budget than zCDP
        (:func:`_coordinate_epsilon`, from the public ``n_features``): then
        the bound reserves no delta and the fit keeps all of it. Without
        ``n_features`` the centre reserves its share of delta.
        """
        epsilon_bounds, delta_bounds = share * epsilon, share * delta
        if not estimate_center:
            return cls(0.0, 0.0, epsilon_bounds)
        epsilon_center = CENTER_SHARE * epsilon_bounds
        if n_features is not None and not _coordinate_epsilon(epsilon_center, delta_bounds,
                                                              n_features)[1]:
            delta_bounds = 0.0
        return cls(epsilon_center, delta_bounds, (1.0 - CENTER_SHARE) * epsilon_bounds)

    @property
    def cost(self):
        """The (epsilon, delta) of :func:`private_bounds` at most (basic composition)."""
        return self.epsilon_center + self.epsilon_radius, self.delta_center


def center_grid(low=GRID_RANGE[0], high=GRID_RANGE[1], ratio=_CENTER_RATIO):
    """Public grid of candidate centre coordinates: 0 and +-low * ratio**i up to high."""
    half = np.geomspace(low, high, math.ceil(math.log(high / low) / math.log(ratio)) + 1)
    return np.concatenate([-half[::-1], [0.0], half])


def radius_grid(low=GRID_RANGE[0], high=GRID_RANGE[1], ratio=_RADIUS_RATIO):
    """Public grid of candidate radii: low * ratio**i up to high."""
    return np.geomspace(low, high, math.ceil(math.log(high / low) / math.log(ratio)) + 1)


def _rank_counts(values, grid):
    """#{values <= t} for every grid point t (additive over disjoint chunks of values)."""
    return np.searchsorted(np.sort(values), grid, side="right")


def _median_counts(values, grid):
    """#{x < t_next} and #{x > t_prev} for every grid point t (additive over chunks of values).

    Their minimum is the median score of the module docstring: the
    interior-point quality of Cohen et al. (2021), App. A.1.2 (values
    rounded down and up to the grid), on any sorted public grid, largest at
    the median and equal to n at the grid points around a point mass.
    """
    ordered = np.sort(values)
    below_next = np.searchsorted(ordered, np.append(grid[1:], np.inf), side="left")
    above_prev = ordered.size - np.searchsorted(ordered, np.insert(grid[:-1], 0, -np.inf),
                                                side="right")
    return below_next, above_prev


def _grid_release(scores, grid, epsilon, rng, log_base_measure=None):
    """Exponential mechanism over ``grid`` with sensitivity-1 ``scores``; returns a grid value."""
    index, event = exponential_mechanism(scores, epsilon=epsilon, sensitivity=1.0, rng=rng,
                                         log_base_measure=log_base_measure)
    return float(grid[index]), event


def _column_median_counts(chunk, grid, n_threads=1):
    """:func:`_median_counts` of every column of a chunk of rows, shape (2, n_features, |grid|).

    The columns are sorted on ``n_threads`` threads (the convention of
    :mod:`skdpcluster.utils._threads`): the counts are whole numbers, the same
    on any number of threads.
    """
    counts = ordered_map(lambda column: _median_counts(column, grid), chunk.X.T, n_threads)
    return np.array(counts).transpose(1, 0, 2)


def _distance_rank_counts(chunk, center, grid, n_threads=1):
    """:func:`_rank_counts` of the distances of a chunk's rows to ``center``.

    The distances are computed :data:`_BLOCK_ROWS` rows at a time (each row's
    distance is the same as in one call on all the rows), and counted in
    parts of :data:`_SORT_ROWS` rows on ``n_threads`` threads (the counts are
    additive over parts and whole numbers: the same on any number of threads,
    the convention of :mod:`skdpcluster.utils._threads`).
    """
    def part_counts(start):
        part = chunk.X[start:start + _SORT_ROWS]
        distances = np.empty(len(part))
        for block_start in range(0, len(part), _BLOCK_ROWS):
            block = slice(block_start, block_start + _BLOCK_ROWS)
            distances[block] = np.linalg.norm(part[block] - center, axis=1)
        return _rank_counts(distances, grid)

    return sum(ordered_map(part_counts, range(0, max(len(chunk.X), 1), _SORT_ROWS), n_threads))


def _coordinate_epsilon(epsilon, delta, n_features):
    """Per-coordinate epsilon of the centre and whether zCDP composition gave it."""
    basic = epsilon / n_features
    if delta <= 0:
        return basic, False
    zcdp = math.sqrt(8.0 * zcdp_rho_for_dp(epsilon, delta) / n_features)
    return (zcdp, True) if zcdp > basic else (basic, False)


def _private_center(rows, budget, neighbouring, rng, n_threads=1):
    """Step 1: coordinate-wise private median on the centre grid, and its composite event.

    The median scores are added up over the chunks of ``rows`` (one pass), each
    chunk's columns sorted on ``n_threads`` threads.
    """
    n_features = rows.shape[1]
    per_coordinate, zcdp = _coordinate_epsilon(budget.epsilon_center, budget.delta_center,
                                               n_features)
    grid = center_grid()
    scores = np.minimum(*rows.map_reduce(_column_median_counts, grid, n_threads))
    center = np.array([_grid_release(scores[j], grid, per_coordinate, rng)[0]
                       for j in range(n_features)])
    event = PrivacyEvent(
        "private_bounds_center", budget.epsilon_center, budget.delta_center if zcdp else 0.0,
        sensitivity=1.0, scale=2.0 / per_coordinate, count=1,
        rho=n_features * per_coordinate**2 / 8.0,
        label="bounds/center", neighbouring=neighbouring,
        details={"composition": "zcdp" if zcdp else "basic", "n_coordinates": n_features,
                 "epsilon_coordinate": per_coordinate, "grid_size": grid.size,
                 "grid_ratio": _CENTER_RATIO, "grid_range": GRID_RANGE},
    )
    return center, event


def radius_quantile(n_samples, epsilon, quantile=0.99, beta=_BETA):
    r"""The quantile the radius step targets, from public values only.

    The rank score is flat above the largest distance, at depth
    :math:`(1 - q) n` below its maximum, so with few rows for the budget a
    0.99 quantile is barely preferred to any radius above all rows, and the
    release overshoots by a factor (the noise of every later step grows with
    it). The target is lowered until that depth is worth
    :math:`\log(|G_r|/\beta)` nats:

    .. math::

        q(n) = \min\left(q_{\max},\ \max\left(\tfrac12,\
            1 - \frac{2\log(|G_r|/\beta)}{n\varepsilon_r}\right)\right).

    A radius slightly too small (a few more rows projected onto the ball)
    costs less than one a few times too large. With many rows this is
    :math:`q_{\max}` (0.99 at n = 10^5 with half of a 10% share of
    epsilon = 1); for ``load_digits`` (n = 1797, the whole share on the
    radius) it is 0.88. The grid is fine (ratio 1.01) because the
    distances of high-dimensional rows concentrate: with ratio 1.1, the
    norms of ``load_digits`` (10% to 99% quantiles within a factor 1.08)
    fell between two grid points, no radius scored near the target, and
    about a third of the releases overshot.

    **Privacy.** :math:`q` depends on the public ``n_samples`` and
    ``epsilon`` only. The score's target :math:`t(n) = q(n)\, n =
    \min(q_{\max} n, \max(n/2, n - 2\log(|G_r|/\beta)/\varepsilon_r))` is
    non-decreasing and 1-Lipschitz in :math:`n` (its slopes are
    :math:`q_{\max}`, 1/2 and 1), so adding (removing) a row moves the count
    by 0 or 1 and the target by at most 1 in the same direction: the score
    keeps sensitivity 1 under add/remove as under replace-one.

    Parameters
    ----------
    n_samples : int
        Public number of rows.
    epsilon : float
        Epsilon of the radius step.
    quantile : float, default=0.99
        The largest quantile :math:`q_{\max}` used.
    beta : float, default=0.05

    Returns
    -------
    float
    """
    margin = math.log(radius_grid().size / beta)
    return min(quantile, max(0.5, 1.0 - 2.0 * margin / (n_samples * epsilon)))


def _private_radius(rows, center, epsilon, quantile, neighbouring, rng, n_threads=1):
    """Step 2: private quantile of the distances to ``center`` on the radius grid (one pass).

    Each chunk's distances are counted in parts on ``n_threads`` threads.
    The event records the quantile :math:`q(n)` under replace-one only:
    under add/remove ``n`` is private and :math:`q(n)` (below its maximum)
    would tell it, so the event records the rule's public maximum.
    """
    grid = radius_grid()
    quantile_max = quantile
    quantile = radius_quantile(rows.shape[0], epsilon, quantile)
    counts = rows.map_reduce(_distance_rank_counts, center, grid, n_threads)
    radius, event = _grid_release(-np.abs(counts - quantile * rows.shape[0]), grid, epsilon, rng,
                                  log_base_measure=-np.log(grid))
    event = PrivacyEvent(
        "private_bounds_radius", epsilon, 0.0, sensitivity=1.0, scale=event.scale,
        rho=epsilon**2 / 8.0,
        label="bounds/radius", neighbouring=neighbouring,
        details={**({"quantile": quantile} if neighbouring == "replace_one"
                    else {"quantile_max": quantile_max}),
                 "safety_factor": RADIUS_SAFETY, "grid_size": grid.size,
                 "grid_ratio": _RADIUS_RATIO, "grid_range": GRID_RANGE},
    )
    return RADIUS_SAFETY * radius, event


def rank_error(epsilon, grid_size, beta=_BETA):
    """Rows by which the exponential mechanism's rank misses, with probability 1 - beta (public)."""
    return (2.0 / epsilon) * math.log(grid_size / beta)


def center_min_rows(budget, n_features):
    """Rows the private centre needs: (4 / eps_coordinate) log(|G_c| / beta) (public)."""
    per_coordinate, _ = _coordinate_epsilon(budget.epsilon_center, budget.delta_center, n_features)
    return math.ceil(2.0 * rank_error(per_coordinate, center_grid().size))


def plan_bounds(n_samples, n_features, epsilon, delta, *, share=BOUNDS_SHARE, center=None,
                neighbouring="replace_one"):
    """The budget of a fit's bound and its public centre, from public values only.

    With ``center=None`` the centre is estimated, except under replace-one
    neighbours when there are fewer than :func:`center_min_rows` rows for
    its share (typically many features and few rows): the bound is then
    centred at the origin, the whole share goes to the radius, and a warning
    says so. That switch reads ``n_samples``, which is public under
    replace-one only. Under add/remove the number of rows is private (the
    neighbours at ``center_min_rows`` and one row fewer would release a
    centre and the origin: disjoint outputs), so the centre is always
    estimated and the warning states the rows it needs, from ``n_features``,
    ``epsilon`` and ``delta`` only.

    Parameters
    ----------
    n_samples : int
        Number of rows; read under ``neighbouring="replace_one"`` only.
    n_features : int
    epsilon, delta : float
        The fit's budget, of which ``share`` goes to the bound.
    share : float, default=BOUNDS_SHARE
    center : array-like of shape (n_features,), default=None
        A public centre; ``None`` plans a private one.
    neighbouring : {"replace_one", "add_remove"}, default="replace_one"

    Returns
    -------
    budget : BoundsBudget
    center : ndarray or None
        ``None`` when the centre is to be estimated.
    """
    _check_choice(neighbouring, "neighbouring", ("replace_one", "add_remove"))
    if center is None:
        budget = BoundsBudget.of_fit(epsilon, delta, share=share, estimate_center=True,
                                     n_features=n_features)
        needed = center_min_rows(budget, n_features)
        if neighbouring == "add_remove":
            _warn_center_rows_private(needed, n_features, budget)
            return budget, None
        if n_samples >= needed:
            return budget, None
        warn_user(f"private bounds: {n_samples} rows are too few to locate a centre privately "
                  f"in {n_features} dimensions with epsilon={budget.epsilon_center:.3g} (at least "
                  f"{needed} are needed); the bound is centred at the origin. Pass a public "
                  "data_center (and data_radius) if the data is far from the origin.",
                  UserWarning)
        center = np.zeros(n_features)
    return BoundsBudget.of_fit(epsilon, delta, share=share, estimate_center=False), center


def _warn_center_rows_private(needed, n_features, budget):
    """Add/remove: the centre is estimated whatever the (private) n; say what it needs (public)."""
    error = rank_error(budget.epsilon_radius, radius_grid().size)
    warn_user(f"private bounds: under add/remove neighbours the number of rows is private, so the "
              f"centre is estimated privately whatever it is; in {n_features} dimensions with "
              f"epsilon={budget.epsilon_center:.3g} it needs at least {needed} rows, and the "
              f"radius quantile is accurate to about +-{error:.0f} rows. With fewer rows, the "
              "released centre and radius can be far off: pass a public data_center (and "
              "data_radius).", UserWarning)


def _degradation_message(n_samples, center, radius, budget, quantile, share_text):
    """The utility warning of a released bound, or ``None``: public values and the release only.

    ``n_samples`` is ``None`` when it is private (add/remove): the rank
    error is then stated by :func:`plan_bounds`, from public values.
    """
    problems = []
    error = rank_error(budget.epsilon_radius, radius_grid().size)
    if n_samples is not None and error > (1.0 - quantile) * n_samples + 0.25 * n_samples:
        problems.append(f"with {n_samples} rows, the radius quantile is accurate to about "
                        f"+-{error:.0f} rows only")
    resolution = max(_TINY_RADIUS * GRID_RANGE[0], _CENTER_RESOLUTION * np.linalg.norm(center))
    if radius <= RADIUS_SAFETY * resolution:
        problems.append(f"the radius {radius:.3g} is at the resolution of the grids: the rows may "
                        "all be (nearly) one point, or lie beyond the public grid "
                        f"(+-{GRID_RANGE[1]:g})")
    if radius >= RADIUS_SAFETY * GRID_RANGE[1] or np.any(np.abs(center) >= GRID_RANGE[1]):
        problems.append(f"the bound reached the end of the public grid ({GRID_RANGE[1]:g}): "
                        "rows far beyond it are projected onto the ball")
    if not problems:
        return None
    return (f"private bounds{share_text}: " + "; ".join(problems) + ". Pass a public "
            "data_radius (and data_center) for better utility.")


def private_bounds(X, *, budget, rng, center=None, quantile=0.99, neighbouring="replace_one",
                   warn_context=""):
    r"""Release a centre and a radius containing about a ``quantile`` share of the rows.

    See the module docstring for the algorithm, its proof and its failure
    modes.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features), or rows of :mod:`skdpcluster.utils._data`
        Finite rows; ``n_samples`` is public. A rows object (e.g. a
        :class:`~skdpcluster.utils._data.DaskRows`, already validated) is
        read chunk by chunk: each step is one pass adding up per-chunk
        histograms, which equal the in-memory ones exactly.
    budget : BoundsBudget
        The (epsilon, delta) of the centre and the epsilon of the radius.
    rng : numpy.random.Generator
    center : array-like of shape (n_features,), default=None
        A public centre; ``None`` estimates it (needs ``budget.epsilon_center > 0``).
    quantile : float, default=0.99
        Largest target share of the rows inside the ball, in (0, 1]; lowered
        for few rows by :func:`radius_quantile` (public values only).
    neighbouring : {"replace_one", "add_remove"}, default="replace_one"
        Recorded in the events; the proof holds under both. Under add/remove
        the number of rows is private: the radius event does not record the
        quantile :math:`q(n)` and the warnings do not read :math:`n`.
    warn_context : str, default=""
        Text naming the caller in warnings (for example the estimator and its share).

    Returns
    -------
    (center, radius) : (ndarray of shape (n_features,), float)
        The released bound.
    events : list of PrivacyEvent
        ``"private_bounds_center"`` (when estimated) and ``"private_bounds_radius"``.

    Raises
    ------
    ValueError
        On invalid parameters, before any randomness is drawn.
    """
    (center, radius), events, message = release_bounds(
        X, budget=budget, rng=rng, center=center, quantile=quantile, neighbouring=neighbouring,
        warn_context=warn_context)
    if message is not None:
        warn_user(message, UserWarning)
    return (center, radius), events


@quiet_floating_point
def release_bounds(X, *, budget, rng, center=None, quantile=0.99, neighbouring="replace_one",
                   warn_context=""):
    """:func:`private_bounds`, returning its utility warning instead of giving it.

    For a fit, which gives the warning once it is committed (after its
    restore-on-error scope): given inside the private step and made an
    error, it ended a charged fit in an unproven failure (review R7, M1).
    Runs under ``np.errstate(all="ignore")``, carried to its threads, as a fit
    does: a finite row of 1e200 overflows its distance (it is beyond every
    radius), and NumPy's warning, or under ``np.seterr(over="raise")`` its
    exception after the centre was drawn, would tell that row apart (review
    R7, M2).

    Returns
    -------
    (center, radius) : (ndarray of shape (n_features,), float)
    events : list of PrivacyEvent
    message : str or None
        The warning's text (public values and the released bound only), or
        ``None`` when the bound is not degraded.
    """
    if hasattr(X, "map_reduce"):
        center = None if center is None else _check_points(np.zeros((1, X.shape[1])), center)[1]
    else:
        X, center = _check_points(X, center)
    rows = as_rows(X)
    quantile = check_probability(quantile, "quantile", closed_right=True)
    _check_choice(neighbouring, "neighbouring", ("replace_one", "add_remove"))
    check_epsilon_delta(budget.epsilon_radius, 0.0)
    if center is None:
        check_epsilon_delta(budget.epsilon_center, budget.delta_center)
    rng = _check_generator(rng)
    # In memory, the passes run on the fit's threads; a rows object's chunks are its tasks.
    n_threads = 1 if hasattr(X, "map_reduce") else fit_threads()
    events = []
    if center is None:
        center, center_event = _private_center(rows, budget, neighbouring, rng, n_threads)
        events.append(center_event)
    radius, radius_event = _private_radius(rows, center, budget.epsilon_radius, quantile,
                                           neighbouring, rng, n_threads)
    events.append(radius_event)
    public_rows = rows.shape[0] if neighbouring == "replace_one" else None
    message = _degradation_message(public_rows, center, radius, budget, quantile, warn_context)
    return (center, radius), events, message
