r"""SampleAggregate-k-Means (Shechner 2021, Section 7; ``spec/shechner_stable.md`` §6, §9.9).

Non-private k-means on disjoint chunks of the rows, a private aggregation of
the chunks' T·k centres into k initial centres, then the core steps of
:class:`~skdpcluster.PrivateStableKMeans` on the rows.
"""

from dataclasses import replace
from numbers import Integral

from sklearn.cluster import KMeans

from skdpcluster.ktuple._tuples import generate_tuples
from skdpcluster.ktuple.averages import project_to_ball
from skdpcluster.cluster._stable import PrivateStableKMeans, _store_parameters
from skdpcluster.cluster._stable_init import GridInitializer
from skdpcluster.utils._compat import HasMethods, Interval, StrOptions
from skdpcluster.utils._docstrings import shared_params

__all__ = ["SampleAggregateStableKMeans"]

#: Rows per cluster and chunk of ``n_chunks="auto"`` (spec §9.9: non-private k-means
#: recovers every cluster from about 50 rows of it).
ROWS_PER_CLUSTER = 50


def _group_factor(n_clusters):
    """Group-privacy factor k^2 of zCDP for the k centres one row moves (Bun & Steinke, Prop. 1.9)."""
    return n_clusters**2


def aggregate_chunk_centers(points, n_clusters, *, rho, data_radius, neighbouring, rng):
    r"""Private k centres of the chunk centres: :math:`\rho`-zCDP when one row moves one chunk.

    The grid coreset initializer
    (:class:`~skdpcluster.cluster._stable_init.GridInitializer`) runs on the
    T·k ``points`` with the budget :math:`\rho/k^2`: it is
    :math:`\rho/k^2`-zCDP for one replaced point, hence :math:`\rho`-zCDP
    for the k points of one chunk (group privacy of zCDP, Bun & Steinke 2016,
    Proposition 1.9). The events carry the row-level :math:`\rho`.

    Returns
    -------
    centers : ndarray of shape (n_clusters, n_features)
    events : list of PrivacyEvent
    info : dict
    """
    group = _group_factor(n_clusters)
    # Too few heavy cells: the estimator warns (UtilityWarning), naming what would help.
    centers, events, info = GridInitializer(warn_few_heavy_cells=False).fit_centers(
        points, n_clusters, budget={"rho": rho / group}, data_radius=data_radius,
        neighbouring=neighbouring, rng=rng)
    events = [replace(event, rho=event.rho * group,
                      label=event.label.replace("stable/grid_init", "sample_aggregate"),
                      details={**event.details, "group_privacy": (
                          f"one row changes the {n_clusters} centres of its chunk: rho x k^2 "
                          "(Bun & Steinke 2016, Proposition 1.9)")})
              for event in events]
    return centers, events, info


class SampleAggregateInitializer:
    r"""Thesis Section 7, steps 1-4, in the practical form of spec §9.9: initial centres B.

    1. The rows are cut into ``n_chunks`` disjoint chunks by a public random
       permutation of the positions
       (:func:`~skdpcluster.ktuple._tuples.generate_tuples`); a replaced row changes
       exactly one chunk.
    2. Non-private k-means on every chunk: T·k points :math:`\tilde C`
       (projected onto :math:`B(0, \Lambda)`, a per-chunk post-processing).
    3. :class:`~skdpcluster.cluster._stable_init.GridInitializer` on
       :math:`\tilde C` with the budget :math:`\rho/k^2`. One row changes one
       chunk, i.e. replaces up to k points of :math:`\tilde C`; a mechanism
       that is :math:`\rho'`-zCDP for one replaced point is
       :math:`k^2\rho'`-zCDP for k (group privacy of zCDP, Bun & Steinke
       2016, Proposition 1.9), so the aggregation is :math:`\rho`-zCDP in
       the rows. Its events are recorded with the row-level :math:`\rho`.

    Parameters
    ----------
    n_chunks : int or "auto"
        T; ``"auto"`` is ``max(1, n // (50 k))``.
    base_estimator : estimator or None
        The non-private clusterer of a chunk; ``None`` is
        ``KMeans(n_init=3)`` (k-means++).
    n_jobs : int or None
        joblib workers of the chunk fits.
    """

    privacy_model = "zcdp"
    can_fail = False

    def __init__(self, n_chunks="auto", base_estimator=None, n_jobs=None):
        self.n_chunks = n_chunks
        self.base_estimator = base_estimator
        self.n_jobs = n_jobs

    def resolved_chunks(self, n_samples, n_clusters):
        """T from public values; refuses, before any randomness, chunks smaller than k rows."""
        if self.n_chunks == "auto":
            n_chunks = max(1, n_samples // (ROWS_PER_CLUSTER * n_clusters))
        else:
            n_chunks = int(self.n_chunks)
        if n_samples // n_chunks < n_clusters:
            raise ValueError(
                f"n_chunks={n_chunks} chunks of n_samples={n_samples} rows leave fewer than "
                f"n_clusters={n_clusters} rows per chunk; use fewer chunks (at most "
                f"{max(n_samples // n_clusters, 1)}) or more data.")
        return n_chunks

    def fit_centers(self, X, n_clusters, *, budget, data_radius, neighbouring, rng):
        """Private initial centres (replace-one neighbours only); see the class docstring."""
        n_chunks = self.resolved_chunks(len(X), n_clusters)
        base = KMeans(n_init=3) if self.base_estimator is None else self.base_estimator
        tuples = generate_tuples(X, base, n_clusters, n_chunks, rng=rng, n_jobs=self.n_jobs)
        points = project_to_ball(tuples.reshape(-1, X.shape[1]), data_radius)  # norms <= radius
        centers, events, info = aggregate_chunk_centers(
            points, n_clusters, rho=budget["rho"], data_radius=data_radius,
            neighbouring=neighbouring, rng=rng)
        return centers, events, {**info, "n_chunks": n_chunks}


@shared_params
class SampleAggregateStableKMeans(PrivateStableKMeans):
    r"""SampleAggregate-k-Means (Shechner 2021, Section 7), practical version; experimental.

    Differentially private under replace-one neighbours
    (``spec/shechner_stable.md`` §6.2, §9.9):

    1. The rows are cut into T = ``n_chunks`` disjoint random chunks and a
       **non-private** k-means runs on each (thesis steps 1-2).
    2. The T·k chunk centres are aggregated privately into k initial centres
       B (thesis steps 3-4): the grid coreset initializer of
       :class:`PrivateStableKMeans` run on the centres, with group privacy
       of size k (one row moves the k centres of its chunk); see
       :class:`SampleAggregateInitializer`.
    3. ``n_core_steps`` core steps on the rows (thesis steps 5-7, as in
       :class:`PrivateStableKMeans`): the output Ĉ. The thesis has no
       selection here (``selection="none"``, the default).

    **What differs from the thesis.** The thesis samples with replacement
    (its Theorem 3.14 needs :math:`\varepsilon \le 1`) and aggregates with the
    Nissim-Stemmer 1-cluster algorithm (Theorem 7.2), peeling k balls of
    about T points each, with advanced composition and group privacy. That
    algorithm has no practical implementation (its constants involve
    :math:`9^{\log^*}` factors, spec §6.1, §11 A25), so the chunks here are
    disjoint (no restriction on epsilon) and the aggregation is the grid
    coreset with k-fold group sensitivity; no grid snapping (A26). The
    guarantees of Theorems 7.8-7.10 are therefore not inherited: privacy is
    proven (zCDP, composed and converted as in
    :class:`PrivateStableKMeans`), utility is measured
    (``benchmarks/bench_local.py``).

    **Guarantee of the thesis** (Theorem 7.8), for comparison: if X is
    :math:`\phi`-separable and :math:`\mathrm{OPT}_k \ge
    \tilde O(k^{2.51}d^{1.51}\Lambda^2/\varepsilon^{1.01})`, then
    :math:`\mathrm{cost}(\hat C) \le (1 + O(\phi^2))\mathrm{OPT}_k +
    O(k\Lambda^2\sqrt d/\varepsilon)\ln(dk/(\beta\delta))`: strictly weaker than
    Corollary 4.4 (the thesis' words). The group-privacy factor :math:`k^2` on
    the aggregation's zCDP budget is where the loss comes from here.

    Parameters
    ----------
    n_clusters : int, default=8
        Number of clusters k (>= 1); ``n_clusters=1`` is the private mean of
        :class:`PrivateStableKMeans` (no chunks).
    epsilon : float, default=1.0
        Privacy parameter of the whole fit, > 0.
    delta : float, default=1e-6
        In (0, 1).
    n_chunks : int or "auto", default="auto"
        T, the number of chunks; ``"auto"`` is ``max(1, n // (50 k))``
        (about 50 rows per cluster and chunk, spec §9.9). Each chunk needs at
        least k rows.
    base_estimator : estimator, default=None
        Non-private clusterer of a chunk, cloned per chunk; ``None`` is
        ``KMeans(n_init=3)``.
    budget_split : dict, default=None
        Fractions among ``"init"`` (the aggregation), ``"core"`` and
        ``"select"``; ``None`` means ``{"init": 0.6, "core": 0.3, "select":
        0.1}``, the select share going to the core steps when
        ``selection="none"``.
    n_core_steps : int, default=2
    core_radius_factor : float, default=1/3
    selection : {"none", "truncated", "full"}, default="none"
        ``"none"`` releases Ĉ (the thesis); the others add the exponential
        mechanism between B and Ĉ of :class:`PrivateStableKMeans`.
    data_radius : float, "data" or None, default=None
        Public bound :math:`\Lambda` on :math:`\|x - c\|`; rows are projected
        onto the ball.
        {private_bound}
        With ``"data"`` ``data_radius_`` is ``nan`` and
        ``privacy_spent_["proven"]`` is False.
    data_center : array-like of shape (n_features,), default=None
        Public centre c of the data ball; ``None`` means the origin when
        ``data_radius`` is given, and a private centre when ``data_radius=None``.
    accountant : BudgetAccountant, default=None
    random_state : None, int or numpy.random.Generator, default=None
    n_jobs : int, default=None
        joblib workers of the chunk fits; the result does not depend on it.
    {verbose}

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (n_clusters, n_features)
        The released centres, rows in lexicographic order.
    initial_centers_ : ndarray of shape (n_clusters, n_features)
        B, the private aggregation of the chunk centres.
    candidate_centers_ : dict of str to ndarray
    selected_ : str
    initializer_info_ : dict
        ``n_chunks`` and the grid diagnostics of the aggregation.
    core_noisy_counts_, core_fallback_ : ndarray
        As in :class:`PrivateStableKMeans`.
    status_ : {"success", "failure"}
        ``"success"`` whenever centres are released (the aggregation has no
        private test, so no ``"fallback"``); ``"failure"`` only when a
        private step raised.
    quality_ : dict
        As in :class:`PrivateStableKMeans`, with ``"heavy_cells_short"``
        (the released number of heavy cells of the aggregation is below
        ``n_clusters``: a :class:`~skdpcluster.UtilityWarning` was emitted),
        plus ``"chunks_suggested"`` (public: chunks that clear the aggregation's
        noise threshold with a margin of
        :data:`~skdpcluster.cluster._stable.HEAVY_CELL_MARGIN`) and
        ``"rows_suggested"`` (public: rows at which ``n_chunks="auto"``
        makes that many chunks; with an integer ``n_chunks`` more rows alone
        do not help, more chunks do).
    labels_ : ndarray of shape (n_samples,)
        **Not private.**
    budget_ : dict
    privacy_spent_ : dict
        ``{"epsilon", "delta", "rho", "proven"}``, as for
        :class:`PrivateStableKMeans` (no ``"rho"`` with ``n_clusters=1``).
    privacy_ledger_ : list of PrivacyEvent
    data_radius_ : float
        The bound :math:`\Lambda` used (the private one when ``data_radius=None``).
    {data_center_}
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (`n_features_in_`,)

    See Also
    --------
    PrivateStableKMeans : The stronger algorithm of the thesis' Section 4.

    References
    ----------
    M. Shechner. Differentially Private Algorithms for Clustering with
    Stability Assumptions. M.Sc. thesis, Ben-Gurion University, 2021, §7.

    Examples
    --------
    >>> from skdpcluster.cluster import SampleAggregateStableKMeans
    >>> from skdpcluster.datasets import make_separated_mixture
    >>> X, _ = make_separated_mixture(50_000, n_clusters=4, n_features=4,
    ...                               separation=10, random_state=0)
    >>> est = SampleAggregateStableKMeans(n_clusters=4, data_radius=30.0,
    ...                                   random_state=0).fit(X)
    >>> est.initializer_info_["n_chunks"]
    250
    """

    _parameter_constraints: dict = {
        **{name: rule for name, rule in PrivateStableKMeans._parameter_constraints.items()
           if name not in ("initializer", "fallback", "beta", "neighbouring",
                           "final_lloyd_step", "estimate_cost")},
        "n_chunks": [StrOptions({"auto"}), Interval(Integral, 1, None, closed="left")],
        "base_estimator": [None, HasMethods(["fit"])],
    }
    #: Fixed: the chunking is private under replace-one neighbours only.
    neighbouring = "replace_one"
    #: Its chunks' non-private k-means reads the rows in memory: Dask input is refused.
    _CHUNKED_INPUT = False
    final_lloyd_step = False
    estimate_cost = False

    def __init__(
        self,
        n_clusters=8,
        *,
        epsilon=1.0,
        delta=1e-6,
        n_chunks="auto",
        base_estimator=None,
        budget_split=None,
        n_core_steps=2,
        core_radius_factor=1 / 3,
        selection="none",
        data_radius=None,
        data_center=None,
        accountant=None,
        random_state=None,
        n_jobs=None,
        verbose=0,
    ):
        _store_parameters(self, locals())

    def _resolve_initializer(self, n_features, center):
        return (SampleAggregateInitializer(self.n_chunks, self.base_estimator, self.n_jobs),
                "sample_aggregate")

    def _plan(self, X):
        plan = super()._plan(X)
        if "initializer" in plan.values:  # not the one-cluster plan (a private mean)
            plan.values["initializer"].resolved_chunks(X.shape[0], self.n_clusters)
        return plan

    # -- honest utility signals: the stable ones, for the grid on the chunk centres ----------
    def _grid_initializes(self):
        """The aggregation is always the grid initializer (on the chunk centres)."""
        return True

    def _grid_point_rho(self, rho):
        """The grid's budget per chunk centre: :math:`\\rho/k^2` (group privacy)."""
        return rho / _group_factor(self.n_clusters)

    def _grid_points_per_cluster(self, n_samples):
        """Each chunk gives about one centre per cluster: T = ``n_chunks`` points (public)."""
        return SampleAggregateInitializer(self.n_chunks).resolved_chunks(n_samples,
                                                                        self.n_clusters)

    def _rows_for_grid_points(self, points):
        """Rows at which ``n_chunks="auto"`` (:math:`T = n/(50k)`) makes ``points`` chunks."""
        return points * ROWS_PER_CLUSTER * self.n_clusters

    def _what_would_help(self, chunks, rows):
        """The advice of the utility warnings: more rows with ``"auto"`` chunks, else more chunks."""
        if self.n_chunks == "auto":
            return f"About {rows} rows (or a larger epsilon) would help"
        return (f"About {chunks} chunks would help (n_chunks={self.n_chunks} fixes their number "
                f"whatever the rows): n_chunks='auto' with about {rows} rows, or "
                f"n_chunks={chunks} if every chunk keeps about "
                f"{ROWS_PER_CLUSTER * self.n_clusters} rows (or a larger epsilon)")

    def _few_grid_points_message(self, n_samples, per_cluster, threshold, points, rows, epsilon):
        """Too few chunks for any heavy cell of the aggregation (public values)."""
        return (
            f"{type(self).__name__}: with {n_samples} rows there are {per_cluster} chunks, so "
            f"each cluster gives about {per_cluster} chunk centres, fewer than the about "
            f"{threshold:.0f} a grid cell of the private aggregation needs to clear its "
            f"noise (epsilon={self.epsilon}, group privacy over {self.n_clusters} centres "
            "per chunk; a public estimate): the initial centres are likely to be filler "
            f"points. {self._what_would_help(points, rows)}; "
            "PrivateStableKMeans needs far fewer rows.")

    def _quality(self, start, chosen, values):
        """The stable ``quality_``, with ``"chunks_suggested"`` (public)."""
        _, chunks, _ = self._heavy_cell_need(values["center"].size,
                                             values["budget"].initializer["rho"])
        return {**super()._quality(start, chosen, values), "chunks_suggested": chunks}

    def _short_grid_message(self):
        """The aggregation's released number of heavy cells is below ``n_clusters``."""
        n_heavy, quality = self.quality_["n_heavy_cells"], self.quality_
        return (
            f"{type(self).__name__}: the private aggregation of the "
            f"{self.initializer_info_['n_chunks']} chunks' centres found {n_heavy} heavy grid "
            f"cells for n_clusters={self.n_clusters} (a function of its released noisy counts), "
            f"so {self.n_clusters - n_heavy} initial centres are filler points and the core "
            "steps may not recover the clusters; status_ stays 'success' (the aggregation "
            "has no private test). "
            f"{self._what_would_help(quality['chunks_suggested'], quality['rows_suggested'])}; "
            "PrivateStableKMeans needs far fewer rows.")
