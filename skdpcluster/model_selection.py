r"""Model selection over private estimators, with honest accounting.

Four facts shape this module.

1. **Every fit of a search spends budget.** With ``GridSearchCV(..., n_jobs=1)``
   (or a threading backend) a shared :class:`~skdpcluster.BudgetAccountant`
   sees every fit, because it keeps its identity through
   :func:`sklearn.base.clone`. With process parallelism (``n_jobs > 1`` and the
   default loky backend, or Dask), the workers get pickled copies, which
   refuse to spend (:class:`~skdpcluster.DetachedAccountantError`).
   :func:`fit_search_charged` charges the whole search **up front**, in the
   parent, before any fit runs, and lets the workers spend on throw-away
   accountants, in any backend.
2. **Choosing parameters by scores computed on private data is itself a
   release.** Composing the fits' costs does not cover it: the
   cross-validation scores, and so the chosen parameters, depend on the data.
   :func:`fit_search_charged` therefore chooses privately by default: the
   exponential mechanism on a clipped held-out k-means cost, priced up front
   with the fits, and the exact scores are removed from ``cv_results_``.
   :func:`select_privately` does the same for candidates fitted by hand.
3. **The splits are public only under replace-one, at row level.** They
   are a function of the number of rows n. Replacing one row leaves n, and so
   the splits, unchanged: every training fold of neighbouring datasets differs
   in at most one row, and each fit costs its own epsilon. Under add/remove
   neighbours n is private, and adding one row moves the fold boundaries
   (a training fold of ``KFold(5)`` changes by up to 3 rows, of a shuffled
   ``KFold`` by hundreds); at client level one client's rows, in every test
   fold, change at once. :func:`search_cost` and :func:`fit_search_charged`
   therefore refuse ``neighbouring="add_remove"`` and
   ``privacy_unit="client"`` before any spend; a plain ``GridSearchCV`` over
   such estimators charges the shared ledger less than the search costs.
4. **Two fits with the same seed draw the same noise.** The folds of a search
   share most rows, so a fixed ``random_state`` makes the difference of two
   releases nearly noise-free. Search with ``random_state=None``.
   :func:`fit_search_charged` checks the streams of a seeded search against
   the accountant before charging, and records them with the charge.
"""

import math
from numbers import Integral, Real

import numpy as np
from sklearn.base import clone, is_classifier
from sklearn.model_selection import (
    GridSearchCV,
    ParameterGrid,
    ParameterSampler,
    RandomizedSearchCV,
    check_cv,
)
from sklearn.pipeline import Pipeline
from sklearn.utils.validation import _num_samples, check_array

from skdpcluster.accountant import (
    BudgetAccountant,
    _owned_streams,
    drawn_noise_key,
    noise_fingerprint,
    noise_stream,
)
from skdpcluster.exceptions import NoiseReuseError, NoiseReuseWarning, PrivacyLeakWarning
from skdpcluster.mechanisms import exponential_mechanism
from skdpcluster.utils import check_random_state
from skdpcluster.utils._warnings import warn_user

__all__ = ["fit_search_charged", "search_cost", "select_privately"]


class _PrepaidAccountant(BudgetAccountant):
    """Throw-away accountant of a search whose whole cost the parent charged up front.

    Unlike other accountants, its copies made by unpickling (in the worker
    processes of a parallel backend) may spend: everything they can be asked
    to spend was already charged to the real ledger by
    :func:`fit_search_charged`. It does not check for repeated noise either;
    :func:`fit_search_charged` checks the search's seeds before charging.
    """

    _COPIES_MAY_SPEND = True

    def _check_noise_locked(self, noise_key):
        return None


def _is_private(obj):
    return hasattr(obj, "get_params") and {"epsilon", "delta", "accountant"} <= set(obj.get_params(deep=False))


def _private_components(estimator):
    """The private estimators inside ``estimator``, keyed by parameter prefix ("" or "step__")."""
    components = {"": estimator} if _is_private(estimator) else {}
    for name, value in estimator.get_params(deep=True).items():
        if value is not estimator and _is_private(value):
            components[f"{name}__"] = value
    return components


def _check_row_level_replace_one(prefix, component):
    """Refuse a component whose neighbours are not "replace one row" (reviews RA-1, RA-2).

    A search's price and its private choice rest on two facts that hold only
    when neighbouring datasets differ by replacing one row: the splits are a
    function of the number of rows n, which is then public, so every training
    fold of neighbours differs in at most one row; and one row lies in at
    most ``m`` test folds, which bounds the choice's sensitivity. Under
    add/remove n is private, and adding one row moves the fold boundaries (a
    training fold of ``KFold(5)`` changes by up to 3 rows, of a shuffled one
    by hundreds). At client level one client's rows (any number, in every test
    fold) change at once, and n is private too; no public bound on a client's
    rows exists to scale the sensitivity, so both are refused.
    """
    name = type(component).__name__
    unit = component.get_params(deep=False).get("privacy_unit", "sample")
    if unit != "sample":
        raise ValueError(
            f"{prefix}privacy_unit={unit!r}: a search over {name} is priced, and chooses, for one row "
            "per person, but one client's rows lie in every test fold and their number (which fixes "
            "the splits) is private, so neither the fits nor the choice would have the charged "
            "epsilon. Searches support privacy_unit='sample' only.")
    relation = component.get_params(deep=False).get("neighbouring", "replace_one")
    if relation != "replace_one":
        raise ValueError(
            f"{prefix}neighbouring={relation!r}: the splits of a search are a function of the number "
            "of rows, which is private under add/remove (adding one row moves the fold boundaries, "
            f"changing a training fold by several rows), so a fit of {name} would not be "
            "epsilon-DP for the epsilon charged. Searches support neighbouring='replace_one' only.")


def _fit_cost(estimator):
    """(epsilon, delta) that one fit of ``estimator`` charges at most; refused where the splits are not public."""
    components = _private_components(estimator)
    for prefix, component in components.items():
        if getattr(component, "accounting", "corrected") == "paper":
            raise ValueError(
                "accounting='paper' charges more than the requested (epsilon, delta); "
                "fit_search_charged supports only the provably private defaults."
            )
        _check_row_level_replace_one(prefix, component)
    components = list(components.values())
    return (math.fsum(c.epsilon for c in components), math.fsum(c.delta for c in components))


def _is_seed(random_state):
    return isinstance(random_state, Integral) and not isinstance(random_state, bool)


def _candidates(search):
    """The parameter sets ``search.fit`` will fit, in its order; refused if they are not determined."""
    if isinstance(search, GridSearchCV):
        return list(ParameterGrid(search.param_grid))
    if isinstance(search, RandomizedSearchCV):
        if not _is_seed(search.random_state):
            raise ValueError(
                f"a RandomizedSearchCV with random_state={search.random_state!r} fits other "
                "candidates than any pricing could draw; set random_state to an int, or use "
                "fit_search_charged, which pins one for the duration of the search."
            )
        return list(ParameterSampler(search.param_distributions, search.n_iter,
                                     random_state=search.random_state))
    raise ValueError(
        f"search must be a GridSearchCV or a RandomizedSearchCV, got {type(search).__name__}; "
        "other searches (such as successive halving) fit a data-dependent number of times."
    )


def search_cost(search, X, y=None, groups=None):
    """The (epsilon, delta) a search over private estimators spends, and its number of fits.

    Every candidate is fitted once per split, and the refit (if any) uses the
    candidate the search chooses, so it is priced at the componentwise
    maximum of the candidates' (epsilon, delta). Fits compose by basic
    composition.

    Parameters
    ----------
    search : GridSearchCV or RandomizedSearchCV
        Unfitted; its ``estimator`` holds one or more private estimators. A
        ``RandomizedSearchCV`` needs an int ``random_state``, so that the
        candidates priced are the ones fitted.
    X, y, groups : array-like
        As passed to ``search.fit`` (used only to count the splits).

    Returns
    -------
    (float, float, int)
        Total epsilon, total delta and the number of fits.

    Raises
    ------
    ValueError
        For another kind of search, a randomized search without an int
        ``random_state``, or a private estimator whose splits are not public
        (``neighbouring="add_remove"``, ``privacy_unit="client"``; see the
        module's notes).
    """
    candidates = _candidates(search)
    n_splits = check_cv(search.cv, y).get_n_splits(X, y, groups)
    costs = [_fit_cost(clone(search.estimator).set_params(**params)) for params in candidates]
    refit = [(max(c[0] for c in costs), max(c[1] for c in costs))] if search.refit else []
    per_fit = [cost for cost in costs for _ in range(n_splits)] + refit
    return (math.fsum(c[0] for c in per_fit), math.fsum(c[1] for c in per_fit), len(per_fit))


class _temporarily:
    """Context manager: set parameters of ``search`` and put the old values back on exit."""

    def __init__(self, search, **params):
        self.search, self.params = search, params

    def __enter__(self):
        self.saved = {name: getattr(self.search, name) for name in self.params}
        self.search.set_params(**self.params)
        return self.search

    def __exit__(self, *exc_info):
        self.search.set_params(**self.saved)
        return False


def _pinned_inputs(search, X, y, groups):
    """The splits as a list and, for a randomized search without an int seed, one drawn from OS entropy.

    Fixing both for the duration of the search makes the candidates and the
    splits that are priced exactly the ones that are fitted.
    """
    cv = check_cv(search.cv, y, classifier=is_classifier(search.estimator))
    pinned = {"cv": [(train, test) for train, test in cv.split(X, y, groups)]}
    if isinstance(search, RandomizedSearchCV) and not _is_seed(search.random_state):
        pinned["random_state"] = int(np.random.default_rng().integers(2**32))
    return pinned


def _candidate_components(search, candidates):
    """``(prefix, component)`` of every private component of every candidate, in order."""
    for params in candidates:
        yield from _private_components(clone(search.estimator).set_params(**params)).items()


def _named_accountant(search, candidates):
    """The one accountant the candidates' private components name, or the default accountant.

    Every private component of every candidate counts (a grid may swap a
    step), not only the first (review R1-2: a pipeline whose scaler names no
    accountant and whose clusterer names ``acc`` was charged to the default
    accountant). Refused before any spend when they name several.
    """
    named = {}  # id(accountant) -> (accountant, the steps that name it)
    for prefix, component in _candidate_components(search, candidates):
        if component.accountant is not None:
            step = prefix[:-2] or type(component).__name__
            named.setdefault(id(component.accountant), (component.accountant, set()))[1].add(step)
    if len(named) > 1:
        steps = "; ".join(f"accountant {number} by {', '.join(sorted(names))}"
                          for number, (_, names) in enumerate(named.values(), start=1))
        raise ValueError(
            f"fit_search_charged: the private steps name {len(named)} different accountants "
            f"({steps}), and a search is charged up front to one ledger. Pass accountant= to "
            "fit_search_charged, or give every private step the same accountant.")
    return next(iter(named.values()))[0] if named else BudgetAccountant.default()


def _seeded_components(search, candidates):
    """The private components of the candidates that have a ``random_state`` (a fixed noise stream)."""
    return [component for _, component in _candidate_components(search, candidates)
            if getattr(component, "random_state", None) is not None]


def _search_noise_keys(seeded_components, choice_random_state):
    """The distinct noise fingerprints a search draws from fixed seeds (:func:`noise_fingerprint`).

    Every fingerprint of each seeded private component (the candidates' fits
    draw from clones of its generator, through both sources), and the first,
    that of the direct draws, of a seeded private choice (``None`` when the
    choice is not private): its exponential mechanism never spawns, so a
    later fit spawning from the same Generator is no repeat. ``None`` when
    there is none: every stream is fresh OS entropy.
    """
    keys = [key for component in seeded_components
            for key in noise_fingerprint(type(component).__name__, component.random_state)]
    choice = noise_fingerprint("fit_search_charged/selection", choice_random_state)
    keys.extend(choice[:1] if choice else ())
    distinct = {}
    for key in keys:
        distinct.setdefault(noise_stream(key), key)
    return tuple(distinct.values()) or None


def _steps_sharing_a_stream(search, candidates):
    """The seeded private components of the first candidate where two draw one stream, or ``[]``.

    Such a candidate repeats noise in every fit, even in a search of one fit
    (review R1-7: a pipeline of two private steps with one seed in a one-fit
    search was charged silently; its ``Pipeline.fit`` is refused).
    """
    for params in candidates:
        seeded = _seeded_components(search, [params])
        keys = [noise_fingerprint(type(component).__name__, component.random_state)
                for component in seeded]
        streams = [stream for key in keys for _, stream in _owned_streams(key)]
        if len(set(streams)) < len(streams):
            return seeded
    return []


def _check_search_seeds(seeded_components, sharing, n_fits, accountant):
    """Warn, or refuse, before any spend, when the fits, or the steps of one fit, share a seed.

    ``sharing`` is what :func:`_steps_sharing_a_stream` returns.
    """
    seeds = {repr(component.random_state) for component in seeded_components}
    if sharing:
        steps = ", ".join(f"{type(component).__name__}(random_state={component.random_state!r})"
                          for component in sharing)
        message = (
            f"fit_search_charged: the private steps {steps} of one candidate have one noise "
            "stream: with an int seed (as in a Pipeline.fit of them) they draw the same noise and "
            "the differences of their releases are noise-free; with one Generator they do when "
            "both draw from the same source (direct draws or spawned children), which cannot be "
            "told before the fit. Give every private step its own seed, or use random_state=None.")
    elif seeds and n_fits >= 2:
        message = (
            "fit_search_charged: the private estimator has random_state="
            f"{', '.join(sorted(seeds))}, so the {n_fits} fits of the search (on folds that share "
            "most rows) draw the same noise and the differences of their releases are nearly "
            "noise-free. Use random_state=None.")
    else:
        return
    if accountant.on_repeated_noise == "raise":
        raise NoiseReuseError(message)
    warn_user(message, NoiseReuseWarning)


def _final_step(estimator):
    return estimator[-1] if isinstance(estimator, Pipeline) else estimator


def _selection_radius(search, candidates, data_radius):
    """Public bound Lambda of the selection: ``data_radius``, or the largest of the candidates' own."""
    if data_radius is None:
        finals = [_final_step(clone(search.estimator).set_params(**params)) for params in candidates]
        radii = [final.get_params().get("data_radius") for final in finals]
        if any(radius is None for radius in radii):
            raise ValueError(
                "selection='private' needs a public bound on the data: set data_radius on the "
                "search's final estimator (for every candidate) or pass data_radius= to "
                "fit_search_charged; selection='non_private' chooses by exact scores (not private)."
            )
        data_radius = max(radii)
    if isinstance(data_radius, bool) or not isinstance(data_radius, Real) or not (
            math.isfinite(data_radius) and data_radius > 0):
        raise ValueError(f"data_radius must be a finite number > 0, got data_radius={data_radius!r}.")
    return float(data_radius)


class _HeldOutClippedCost:
    r"""Scorer: minus the clipped k-means cost of held-out rows, :math:`-\sum_x \min(\|x - c(x)\|^2, C)`.

    ``C`` = ``ceiling``. An estimator that released no centres gets the worst
    score, ``-C`` per row. For a pipeline, the rows go through the steps
    before the final estimator (which must then be public transforms).
    """

    def __init__(self, ceiling):
        self.ceiling = ceiling

    def __call__(self, estimator, X, y=None):
        if isinstance(estimator, Pipeline):
            X = estimator[:-1].transform(X)
        final = _final_step(estimator)
        centers = getattr(final, "cluster_centers_", None)
        if centers is None:
            centers = getattr(final, "means_", None)
        return -_clipped_cost(check_array(X, dtype=np.float64), centers, self.ceiling)


class _PrivateChoice:
    r"""``refit`` callable of a search: the exponential mechanism on the summed held-out scores.

    The score of candidate j is :math:`\sum_s \mathrm{score}_{j,s}`, the
    clipped held-out cost summed over the splits s, with a failed fit's split
    scored ``-C`` per held-out row. Given the released centres of the
    training folds (already charged), replacing one row changes only the terms
    of the splits that hold it out, each by at most ``C``, so the sensitivity
    is ``multiplicity * C``, where ``multiplicity`` is the largest number of
    test folds a row is in (1 for k-fold).
    """

    def __init__(self, epsilon, sensitivity, worst_split_scores, rng):
        self.epsilon, self.sensitivity, self.rng = epsilon, sensitivity, rng
        self.worst_split_scores = np.asarray(worst_split_scores, dtype=float)
        self.event = None

    def __call__(self, cv_results):
        worst = self.worst_split_scores
        split_scores = np.column_stack(
            [np.asarray(cv_results[f"split{s}_test_score"], dtype=float) for s in range(worst.size)])
        split_scores = np.where(np.isfinite(split_scores), np.clip(split_scores, worst, 0.0), worst)
        index, self.event = exponential_mechanism(
            split_scores.sum(axis=1), epsilon=self.epsilon, sensitivity=self.sensitivity,
            rng=self.rng, label="fit_search_charged/selection")
        return int(index)


def _check_no_local_model(search, candidates):
    """Refuse a private choice over a local-model estimator: it scores raw rows at a curator.

    The choice computes every candidate's clipped cost on the raw held-out
    rows in one place, as a trusted curator would. That is a central-model
    release: it is private, but a local-model estimator promises that no
    party, not even the server, sees a raw row.
    """
    for _, component in _candidate_components(search, candidates):
        if getattr(component, "_LOCAL_MODEL", False):
            name = type(component).__name__
            raise ValueError(
                f"selection='private' over {name}: the private choice scores the raw held-out "
                "rows in one place, at a trusted curator, but a local-model estimator promises "
                "that no party (not even the server) sees a raw row. Choose its parameters by "
                "public considerations (public data, or the public noise estimate that its "
                "UtilityWarning reports). If a curator that may see the rows does exist, use a "
                "central estimator, or choose with select_privately (a central-model choice) or "
                "selection='non_private' (not private).")


def _private_selection(search, candidates, splits, n_samples, *, epsilon, data_radius, random_state):
    """The scorer and the ``refit`` callable of a private choice; validated before any spend."""
    _check_no_local_model(search, candidates)
    if isinstance(epsilon, bool) or not isinstance(epsilon, Real) or not (
            math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(
            f"selection_epsilon must be a finite number > 0, got selection_epsilon={epsilon!r}.")
    if not search.refit:
        raise ValueError("selection='private' chooses and refits one candidate: set refit=True on the "
                         "search, or use selection='non_private' (not private).")
    ceiling = (2.0 * _selection_radius(search, candidates, data_radius)) ** 2
    held_out = np.concatenate([test for _, test in splits])
    multiplicity = int(np.bincount(held_out, minlength=n_samples).max())
    worst = [-ceiling * len(test) for _, test in splits]
    rng = check_random_state(random_state)
    choice = _PrivateChoice(float(epsilon), multiplicity * ceiling, worst, rng)
    return _HeldOutClippedCost(ceiling), choice


def _drop_exact_scores(search):
    search.cv_results_ = {key: value for key, value in search.cv_results_.items()
                          if "test_score" not in key and "train_score" not in key}


def fit_search_charged(search, X, y=None, *, accountant=None, groups=None, selection="private",
                       selection_epsilon=0.1, data_radius=None, random_state=None, **fit_params):
    r"""Fit ``search`` after charging its whole cost, fits and choice, to ``accountant`` up front.

    Works with any ``n_jobs`` and joblib backend: the parent charges
    :func:`search_cost` (plus ``selection_epsilon``) once, all or nothing,
    before any data is touched; the fits then run with throw-away accountants,
    so nothing is spent twice and nothing goes unrecorded. The splits, and the
    candidates of a ``RandomizedSearchCV`` (whose ``random_state``, if not an
    int, is drawn from OS entropy for the duration), are fixed first, so the
    price is that of exactly the fits that run. The fitted
    ``best_estimator_`` gets the real accountant back as its parameter.

    **What is private.** With ``selection="private"`` (the default) every
    output is private: the fits are private releases, and the choice of
    ``best_index_``/``best_params_`` (and so the refit) is made by the
    exponential mechanism (McSherry & Talwar 2007) at ``selection_epsilon`` on
    the score of each candidate

    .. math::

        u_j = -\sum_{s}\sum_{x \in \mathrm{test}_s} \min(\|x - c_{j,s}(x)\|^2, (2\Lambda)^2),

    where :math:`c_{j,s}` are the centres candidate j released on the training
    rows of split s and :math:`\Lambda` the public ``data_radius``. Given those
    (already charged) releases, replacing one row changes :math:`u_j` by at
    most :math:`m(2\Lambda)^2`, with m the largest number of test folds a row
    is in (1 for k-fold), which is the sensitivity used. The total is the fits'
    cost plus ``selection_epsilon`` by basic composition. ``cv_results_``
    keeps the candidates' parameters and timings but not the exact scores
    (``*test_score*``, ``*train_score*``), and ``best_score_`` is not set. The
    splits, ``y`` and ``groups`` are treated as public. Preprocessing steps
    of a pipeline must be public transforms.

    With ``selection="non_private"`` (a :class:`PrivacyLeakWarning` is
    emitted) only the fits are private: ``best_params_``, the refit and
    ``cv_results_`` come from the search's own exact scores on the private
    folds, which no guarantee covers.

    **Replace-one, one row per person only.** The splits are treated as
    public, which holds when neighbours differ by replacing one row (the
    number of rows, which fixes the splits, is then public), and the choice's
    sensitivity is that of one row. Private estimators with
    ``neighbouring="add_remove"`` (n private: adding a row moves the fold
    boundaries) or ``privacy_unit="client"`` (one client's rows change at once,
    in every test fold) are refused with a ``ValueError`` before any spend.

    **Central model only.** The private choice scores the raw held-out rows in
    one place, as a trusted curator would. A local-model estimator
    (:class:`~skdpcluster.local.LocalPrivateStableKMeans`) promises that no
    party, not even the server, sees a raw row, so ``selection="private"``
    over one is refused with a ``ValueError`` before any spend: choose its
    parameters by public considerations (public data, or the public noise
    estimate of its :class:`~skdpcluster.UtilityWarning`), or, where a
    curator may see the rows, use a central estimator, or choose with
    :func:`select_privately` or ``selection="non_private"`` (not private).
    The same holds for :class:`~skdpcluster.FederatedPrivateKMeans` deployed
    with secure aggregation, where no party sees a row: its private choice
    is accepted, because the search (like its default simulation) runs where
    the rows are, so it needs a curator trusted with the rows
    (:doc:`/federated`, "Choosing parameters").

    Parameters
    ----------
    search : GridSearchCV or RandomizedSearchCV
        Its ``estimator`` holds one or more private estimators. Its
        ``random_state`` should be ``None``: a fixed seed makes every fit draw
        the same noise (:class:`NoiseReuseWarning`, or
        :class:`NoiseReuseError` from an accountant with
        ``on_repeated_noise="raise"``), and so do two private steps of one
        candidate on one seed, even in a search of one fit. The noise streams of the seeded
        private estimators (over all candidates) and of a seeded private
        choice are checked against ``accountant`` before the charge (a
        stream already in its ledger, or a fit on it under way, warns or
        refuses in the same way) and recorded in the charge's ledger entry,
        so that a later fit with one of those seeds is noticed too.
    X, y : array-like
    accountant : BudgetAccountant, default=None
        Charged with the search's cost. ``None`` uses the accountant that the
        private estimators name (their ``accountant`` parameter, over every
        step and every candidate), or the default accountant when none names
        one; a ``ValueError`` naming the steps is raised, before any spend,
        when they name different accountants.
    groups : array-like, default=None
    selection : {"private", "non_private"}, default="private"
        How the refitted candidate is chosen, see above. ``"private"``
        replaces the search's ``scoring`` and ``refit`` for the duration.
    selection_epsilon : float, default=0.1
        Budget of the private choice.
    data_radius : float, default=None
        Public bound :math:`\Lambda` of the private choice (the norm of the
        rows seen by the final estimator); ``None`` takes the largest
        ``data_radius`` of the candidates' final estimators.
    random_state : None, int, numpy.random.SeedSequence or numpy.random.Generator, default=None
        Randomness of the private choice.
    **fit_params : dict
        Passed to ``search.fit``.

    Returns
    -------
    search : the fitted search
        With ``selection_event_``, the :class:`~skdpcluster.mechanisms.PrivacyEvent`
        of the private choice (``None`` for ``selection="non_private"``).

    Raises
    ------
    ValueError
        For invalid arguments, a private estimator with
        ``neighbouring="add_remove"`` or ``privacy_unit="client"``,
        ``selection="private"`` over a local-model estimator, or, with
        ``accountant=None``, private steps that name different accountants,
        before anything is charged.
    BudgetExceededError
        If the search's cost does not fit in ``accountant``; nothing is charged.
    """
    components = _private_components(search.estimator)
    if not components:
        raise ValueError("search.estimator holds no private estimator (with epsilon, delta, accountant).")
    if selection not in ("private", "non_private"):
        raise ValueError(f"selection must be 'private' or 'non_private', got selection={selection!r}.")
    pinned = _pinned_inputs(search, X, y, groups)
    with _temporarily(search, **pinned):
        epsilon, delta, n_fits = search_cost(search, X, y, groups)
        candidates = _candidates(search)
        if accountant is None:
            accountant = _named_accountant(search, candidates)
        sink = {f"{prefix}accountant": _PrepaidAccountant() for prefix in components}
        overrides = {"estimator": clone(search.estimator).set_params(**sink)}
        choice = None
        if selection == "private":
            overrides["scoring"], choice = _private_selection(
                search, candidates, pinned["cv"], _num_samples(X), epsilon=selection_epsilon,
                data_radius=data_radius, random_state=random_state)
            overrides["refit"] = choice
            epsilon += selection_epsilon
        seeded = _seeded_components(search, candidates)
        _check_search_seeds(seeded, _steps_sharing_a_stream(search, candidates), n_fits, accountant)
        noise_keys = _search_noise_keys(seeded, random_state if choice is not None else None)
        if selection == "non_private":
            warn_user("fit_search_charged(selection='non_private'): best_params_, the refit and "
                      "cv_results_ come from exact scores on the private data and are not private; "
                      "only the fits are.", PrivacyLeakWarning)
        # The seeded streams are checked against the ledger (and fits under way) and recorded with
        # the charge, so that a later fit with one of those seeds is noticed too (re-review V1-6).
        with accountant.reserve(epsilon, delta, noise_key=noise_keys):
            accountant.spend(epsilon, delta, label=f"{type(search).__name__}: {n_fits} fits"
                             f"{' and a private choice' if choice else ''} charged up front",
                             noise_key=noise_keys)
        with _temporarily(search, **overrides):
            search.fit(X, y, groups=groups, **fit_params)
    if choice is not None:
        _drop_exact_scores(search)
    search.selection_event_ = choice.event if choice is not None else None
    if hasattr(search, "best_estimator_"):
        search.best_estimator_.set_params(**{key: accountant for key in sink})
    return search


def select_privately(candidates, X, *, data_radius, epsilon, random_state=None, accountant=None):
    r"""Choose among fitted candidates by the exponential mechanism on a clipped k-means cost.

    The score of candidate j is :math:`-\sum_i \min(\|x_i - c_{j}(x_i)\|^2, (2\Lambda)^2)`,
    where :math:`c_j(x_i)` is its nearest released centre and
    :math:`\Lambda` = ``data_radius``. Clipping bounds each row's term in
    :math:`[0, 4\Lambda^2]`, so replacing one row changes every score by at
    most :math:`4\Lambda^2`, and the choice is ``epsilon``-DP (McSherry &
    Talwar 2007), under replace-one and add/remove neighbours alike (adding
    or removing a row also moves every score by at most :math:`4\Lambda^2`).
    The candidates themselves must have been fitted privately (their budgets
    are already charged); the total is their costs plus ``epsilon`` by basic
    composition. The bound is for one row per person: candidates fitted with
    ``privacy_unit="client"`` are refused. The charge is recorded under the
    accountant's relation (its ``neighbouring``, else that of its first
    entry, else replace-one), so it composes with the candidates' own fits.
    The scores are computed on the raw rows in one place, so this is a
    central-model choice: it needs a curator trusted with the rows, also
    for candidates of the local model or of a federated deployment with
    secure aggregation.

    Parameters
    ----------
    candidates : list of fitted private estimators
        Each with ``cluster_centers_`` (``None`` if its private test failed:
        such a candidate gets the worst possible score).
    X : array-like of shape (n_samples, n_features)
        The private data the candidates were fitted on.
    data_radius : float
        Public bound Lambda on the norm of the rows (and of useful centres), so
        that every squared distance worth counting is below :math:`(2\Lambda)^2`.
    epsilon : float
        Budget of the selection.
    random_state : None, int, SeedSequence or Generator
        Randomness of the choice. Its noise stream is checked against
        ``accountant`` before the draw and recorded with the charge, as a
        fit's is: a seed already in the ledger, or on a fit under way, warns
        (:class:`~skdpcluster.NoiseReuseWarning`) or, with
        ``on_repeated_noise="raise"``, refuses
        (:class:`~skdpcluster.NoiseReuseError`) before anything is spent.
    accountant : BudgetAccountant, default=None
        Charged with ``epsilon``; ``None`` uses the default accountant.

    Returns
    -------
    index : int
        Position of the chosen candidate.

    Raises
    ------
    ValueError
        For an invalid ``data_radius``, no candidates, or a candidate with
        ``privacy_unit`` other than ``"sample"``, before anything is spent.
    """
    X = check_array(X, dtype=np.float64)
    if not (2.0**-500 <= data_radius <= 1e100):
        raise ValueError(
            f"data_radius must be a number in [2**-500, 1e100], got {data_radius!r} (the range "
            "the estimators accept: beyond it the clipped costs and their sensitivity 4 Lambda^2 "
            "underflow or overflow); rescale X and the candidates.")
    if not candidates:
        raise ValueError("candidates must be a non-empty list of fitted estimators.")
    for candidate in candidates:
        unit = getattr(candidate, "privacy_unit", "sample")
        if unit != "sample":
            raise ValueError(
                f"a candidate has privacy_unit={unit!r}: select_privately's sensitivity 4 Lambda^2 is "
                "that of one row, and one client holds many; choose among privacy_unit='sample' fits.")
    accountant = BudgetAccountant.default() if accountant is None else accountant
    # The choice is epsilon-DP under both relations (one row added, removed or replaced moves
    # each clipped cost by at most 4 Lambda^2): it is charged under the ledger's relation
    # (re-review V1: charged as replace-one, it was refused on an add/remove ledger).
    ledger = accountant.ledger
    relation = accountant.neighbouring or (ledger[0].neighbouring if ledger else "replace_one")
    # The noise stream is reserved with the check, atomically, and recorded with the spend, as a
    # fit's is (review R1-3: a seeded choice repeated, or followed by a fit on its seed, passed).
    noise_key = noise_fingerprint("select_privately", random_state)
    with accountant.reserve(epsilon, 0.0, noise_key=noise_key, neighbouring=relation):
        rng = check_random_state(random_state)
        ceiling = (2.0 * data_radius) ** 2
        scores = np.array([-_clipped_cost(X, c.cluster_centers_, ceiling) for c in candidates])
        index, event = exponential_mechanism(scores, epsilon=epsilon, sensitivity=ceiling, rng=rng,
                                             label="select_privately", neighbouring=relation)
        accountant.spend(epsilon, 0.0, label="select_privately", events=[event],
                         noise_key=drawn_noise_key(noise_key, rng), neighbouring=relation)
    return index


def _clipped_cost(X, centers, ceiling):
    if centers is None:
        return ceiling * X.shape[0]
    squared = ((X[:, None, :] - centers[None, :, :]) ** 2).sum(axis=-1).min(axis=1)
    return float(np.minimum(squared, ceiling).sum())
