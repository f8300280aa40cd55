r"""SampleAggregate-k-Means (Shechner 2021, Section 7; ``spec/shechner_stable.md`` §6, §9.9).

Non-private k-means on disjoint chunks of the rows, a private aggregation of
the chunks' T·k centres into k initial centres, then the core steps of
:class:`~skdpcluster.PrivateStableKMeans` on the rows.
"""

import math
import warnings
from dataclasses import replace
from numbers import Integral

from sklearn.cluster import KMeans

from skdpcluster.ktuple._tuples import generate_tuples
from skdpcluster.ktuple.averages import project_to_ball
from skdpcluster.cluster._stable import PrivateStableKMeans, _store_parameters, plan_budget
from skdpcluster.cluster._stable_init import GridInitializer
from skdpcluster.utils._compat import HasMethods, Interval, StrOptions
from skdpcluster.exceptions import UtilityWarning
from skdpcluster.utils._docstrings import shared_params
from skdpcluster.utils._warnings import warn_user

__all__ = ["SampleAggregateStableKMeans"]

#: Rows per cluster and chunk of ``n_chunks="auto"`` (spec §9.9: non-private k-means
#: recovers every cluster from about 50 rows of it).
ROWS_PER_CLUSTER = 50
#: Margin of the rows suggested by the utility warnings over the bare threshold: a cluster's
#: chunk centres can straddle a cell boundary of the (randomly shifted) grid and split their
#: count. Measured at k = d = 4, epsilon = 1 (``benchmarks/bench_local.py``'s mixture, radius 20,
#: seeds 0 and 1): 2e5 rows (1x) gave 2 and 1 heavy cells (cost 4.7 and 8.1 x sklearn's), 4e5
#: (2x) gave 4 and 4 (1.003 and 1.93 x): enough heavy cells are needed, not always sufficient.
HEAVY_CELL_MARGIN = 2.0


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
    with warnings.catch_warnings():
        # Too few heavy cells: the estimator warns (UtilityWarning), naming what would help.
        warnings.filterwarnings("ignore", message="GridInitializer: only", category=UserWarning)
        centers, events, info = GridInitializer().fit_centers(
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
        As in :class:`PrivateStableKMeans`, plus ``"heavy_cells_short"``
        (the released number of heavy cells of the aggregation is below
        ``n_clusters``: a :class:`~skdpcluster.UtilityWarning` was emitted)
        ``"chunks_suggested"`` (public: chunks that clear the aggregation's
        noise threshold with a margin of :data:`HEAVY_CELL_MARGIN`) and
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

    # -- honest utility signals -------------------------------------------------------
    def _heavy_cell_need(self, n_features, rho_init):
        r"""Chunk centres a heavy cell needs, and the chunks and rows that give it (public).

        Each chunk gives about one centre per cluster, so a cluster brings about
        T = ``n_chunks`` points to the aggregation's grid, whose noisy counts
        (budget :math:`\rho/k^2`, group privacy) must clear the threshold
        :math:`\tau` of :meth:`GridInitializer.heavy_cell_threshold`. The
        suggestion is :data:`HEAVY_CELL_MARGIN` times that many chunks, and the
        rows at which ``n_chunks="auto"`` (:math:`T = n/(50k)`) makes them.

        Returns
        -------
        threshold : float
        chunks : int
            Chunks suggested, :math:`\lceil 2\tau\rceil`.
        rows : int
            Rows suggested: ``chunks`` chunks of :data:`ROWS_PER_CLUSTER` rows per cluster.
        """
        threshold = GridInitializer().heavy_cell_threshold(
            n_features, rho_init / _group_factor(self.n_clusters), self.neighbouring)
        chunks = math.ceil(HEAVY_CELL_MARGIN * threshold)
        return threshold, chunks, chunks * ROWS_PER_CLUSTER * self.n_clusters

    def _what_would_help(self, chunks, rows):
        """The advice of the utility warnings: more rows with ``"auto"`` chunks, else more chunks."""
        if self.n_chunks == "auto":
            return f"About {rows} rows (or a larger epsilon) would help"
        return (f"About {chunks} chunks would help (n_chunks={self.n_chunks} fixes their number "
                f"whatever the rows): n_chunks='auto' with about {rows} rows, or "
                f"n_chunks={chunks} if every chunk keeps about "
                f"{ROWS_PER_CLUSTER * self.n_clusters} rows (or a larger epsilon)")

    def _warn_if_noise_dominates(self, n_samples, n_features):
        """Also warn, before spending, when the chunks are too few for any heavy cell (public)."""
        super()._warn_if_noise_dominates(n_samples, n_features)
        if self.n_clusters == 1:
            return
        fractions = self._fractions("zcdp", False)
        rho_init = plan_budget("zcdp", fractions, self.epsilon, self.delta).initializer["rho"]
        threshold, chunks, rows = self._heavy_cell_need(n_features, rho_init)
        n_chunks = SampleAggregateInitializer(self.n_chunks).resolved_chunks(n_samples,
                                                                            self.n_clusters)
        if n_chunks < threshold:
            warn_user(
                f"{type(self).__name__}: with {n_samples} rows there are {n_chunks} chunks, so "
                f"each cluster gives about {n_chunks} chunk centres, fewer than the about "
                f"{threshold:.0f} a grid cell of the private aggregation needs to clear its "
                f"noise (epsilon={self.epsilon}, group privacy over {self.n_clusters} centres "
                "per chunk; a public estimate): the initial centres are likely to be filler "
                f"points. {self._what_would_help(chunks, rows)}; "
                "PrivateStableKMeans needs far fewer rows.", UtilityWarning)

    def _quality(self, start, chosen, values):
        """The stable ``quality_``, and a :class:`UtilityWarning` when the aggregation's released
        number of heavy cells is below ``n_clusters`` (post-processing: free)."""
        quality = super()._quality(start, chosen, values)
        n_heavy, info = quality["n_heavy_cells"], start["info"]
        _, chunks, rows = self._heavy_cell_need(values["center"].size,
                                                values["budget"].initializer["rho"])
        quality.update(heavy_cells_short=n_heavy < self.n_clusters, chunks_suggested=chunks,
                       rows_suggested=rows)
        if n_heavy < self.n_clusters:
            warn_user(
                f"{type(self).__name__}: the private aggregation of the {info['n_chunks']} "
                f"chunks' centres found {n_heavy} heavy grid cells for n_clusters="
                f"{self.n_clusters} (a function of its released noisy counts), so "
                f"{self.n_clusters - n_heavy} initial centres are filler points and the core "
                "steps may not recover the clusters; status_ stays 'success' (the aggregation "
                f"has no private test). {self._what_would_help(chunks, rows)}; "
                "PrivateStableKMeans needs far fewer rows.", UtilityWarning)
        return quality
