"""Private bounds (skdpcluster.bounds) and the estimators' default ``data_radius=None``."""

import math
import tracemalloc
import warnings

import numpy as np
import pytest

from dp_stats import epsilon_lower_bound
from skdpcluster import (
    BudgetAccountant,
    FederatedPrivateKMeans,
    KTupleClusterer,
    PrivacyLeakWarning,
    PrivateGaussianMixture,
    PrivateHighDimKMeans,
    PrivateHighDimKMedian,
    PrivateStableKMeans,
    PrivateStableKMedian,
    SampleAggregateStableKMeans,
)
from skdpcluster import bounds as B
from skdpcluster import mechanisms as M
from skdpcluster.datasets import make_separated_mixture
from skdpcluster.preprocessing import PrivateStandardScaler
from skdpcluster.utils._data import as_rows

BUDGET = B.BoundsBudget.of_fit(1.0, 1e-6, estimate_center=True)


@pytest.fixture(scope="module")
def blobs():
    """The stable benchmark's mixture (k = 4, d = 4, closest means 10 apart), shifted off the origin."""
    X, y = make_separated_mixture(20_000, n_clusters=4, n_features=4, separation=10 / math.sqrt(2),
                                  random_state=0)
    return X + 30.0, y


def _ledger_sum(events):
    return math.fsum(e.cost()[0] for e in events), math.fsum(e.cost()[1] for e in events)


def _assert_within(spent, request, epsilon_exact=False):
    """The ledger never exceeds the request; the bound's epsilon is spent whatever it finds."""
    assert spent[0] <= request[0] * (1 + 1e-9) and spent[1] <= request[1] * (1 + 1e-9)
    if epsilon_exact:
        assert spent[0] == pytest.approx(request[0])


# ---------------------------------------------------------------------------
# The function
# ---------------------------------------------------------------------------


def test_budget_split_is_the_documented_share():
    assert BUDGET.cost == pytest.approx((0.1, 1e-7))
    assert BUDGET.epsilon_center == pytest.approx(0.05) and BUDGET.epsilon_radius == pytest.approx(0.05)
    radius_only = B.BoundsBudget.of_fit(2.0, 1e-6, estimate_center=False)
    assert radius_only.cost == pytest.approx((0.2, 0.0))


def test_a_pure_centre_reserves_no_delta():
    # d = 4: basic composition gives each coordinate more than zCDP, so the whole bound is
    # pure epsilon-DP and leaves all of delta to the fit; d = 64: zCDP, which uses the delta.
    assert B.plan_bounds(20_000, 4, 1.0, 1e-6)[0].cost == pytest.approx((0.1, 0.0))
    assert B.plan_bounds(10**5, 64, 1.0, 1e-6)[0].cost == pytest.approx((0.1, 1e-7))


def test_the_fit_keeps_the_delta_a_pure_bound_does_not_use(blobs):
    est = PrivateStableKMeans(4, accountant=BudgetAccountant(), random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        est.fit(blobs[0])
    assert [e.delta for e in est.privacy_ledger_[:2]] == [0.0, 0.0]
    assert est.privacy_spent_["delta"] == pytest.approx(1e-6)  # 9e-7 when the bound held 10%


@pytest.mark.parametrize("n, epsilon, expected", [
    (10**5, 0.05, 0.99),  # many rows: the 0.99 quantile
    (1_797, 0.1, 0.876),  # load_digits with the whole 10% share on the radius
    (178, 0.1, 0.5),  # load_wine: the median
])
def test_radius_quantile_is_lowered_for_few_rows(n, epsilon, expected):
    assert B.radius_quantile(n, epsilon) == pytest.approx(expected, abs=1e-3)


@pytest.mark.parametrize("epsilon", [0.01, 0.1, 1.0])
def test_radius_target_is_monotone_and_1_lipschitz_in_n(epsilon):
    # The add/remove half of the proof: t(n) = q(n) n moves by at most 1, in the direction of n.
    n = np.arange(1, 20_001)
    target = np.array([B.radius_quantile(m, epsilon) for m in n]) * n
    steps = np.diff(target)
    assert np.all(steps >= 0) and np.all(steps <= 1 + 1e-9)


def test_few_rows_do_not_overshoot_the_radius():
    # load_digits-sized data (n = 1800, d = 64, pixels in [0, 16]) with the whole 10% share
    # of epsilon = 1 on the radius: the 0.99 target sits (1 - q) n eps / 2 = 0.9 nat above the
    # radii beyond every row, so it overshot by 1.5x or more in about half of the draws.
    X = np.random.default_rng(13).uniform(0, 16, size=(1_800, 64))
    budget = B.BoundsBudget.of_fit(1.0, 1e-6, estimate_center=False)
    largest = np.linalg.norm(X, axis=1).max()
    radii = np.array([B.private_bounds(X, budget=budget, center=np.zeros(64),
                                       rng=np.random.default_rng(seed))[0][1]
                      for seed in range(200)])
    assert np.mean(radii > 1.5 * largest) <= 0.1
    assert np.mean(radii < 0.5 * largest) <= 0.01  # and it does not fall short instead


def test_bound_contains_the_quantile_and_is_tight(blobs):
    X, _ = blobs
    (center, radius), events = B.private_bounds(X, budget=BUDGET, rng=np.random.default_rng(0))
    distances = np.linalg.norm(X - center, axis=1)
    # Centre: a coordinate-wise median up to the grid's 1% relative resolution and the rank error.
    assert np.all(np.abs(center - np.median(X, axis=0)) <= 0.01 * np.abs(np.median(X, axis=0)) + 1.0)
    # Radius: safety * a grid value within a factor 1.01 of a quantile near 0.99 (rank error
    # (2 / 0.05) log(3473 / 0.05) = 446 rows of 20 000 about the 0.978 quantile, so between
    # the 0.97 and the 1.0 quantile).
    assert np.quantile(distances, 0.97) <= radius <= B.RADIUS_SAFETY * 1.1 * distances.max()
    assert np.mean(distances > radius) <= 0.01
    _assert_within(_ledger_sum(events), BUDGET.cost, epsilon_exact=True)
    assert [e.label for e in events] == ["bounds/center", "bounds/radius"]


def test_public_center_is_used_and_only_the_radius_is_paid(blobs):
    X, _ = blobs
    budget = B.BoundsBudget.of_fit(1.0, 1e-6, estimate_center=False)
    center = np.full(4, 30.0)
    (released, radius), events = B.private_bounds(X, budget=budget, center=center,
                                                  rng=np.random.default_rng(1))
    assert np.array_equal(released, center) and len(events) == 1
    assert _ledger_sum(events) == pytest.approx((0.1, 0.0))
    assert radius >= np.quantile(np.linalg.norm(X - center, axis=1), 0.97)


def test_radius_step_copies_no_rows_and_gives_the_one_call_distances(monkeypatch):
    # Issue #17: the distances to the centre were one call on X - center (two copies of the
    # rows: the peak of a whole KTupleClusterer fit at n = 1e6); now blocks of rows.
    monkeypatch.setattr(B, "_BLOCK_ROWS", 1000)
    X = np.random.default_rng(0).standard_normal((40_000, 10)) * 3.0
    center, grid = np.full(10, 0.5), B.radius_grid()
    tracemalloc.start()
    try:
        counts = B._distance_rank_counts(as_rows(X).chunk, center, grid)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert np.array_equal(counts, B._rank_counts(np.linalg.norm(X - center, axis=1), grid))
    # the distances and their sorted copy (2 x 8 bytes a row), a block, the counts
    assert peak <= 0.3 * X.nbytes


@pytest.mark.parametrize("n_threads", [1, 2])
def test_threaded_passes_give_the_one_call_counts(monkeypatch, n_threads):
    # Issue #17: in memory the columns are sorted, and the distances counted in parts, on the
    # fit's threads; the counts must be those of one sort of all the values, on any thread count.
    monkeypatch.setattr(B, "_BLOCK_ROWS", 1000)
    monkeypatch.setattr(B, "_SORT_ROWS", 3000)  # 14 parts, the last one short
    X = np.random.default_rng(1).standard_normal((40_500, 4)) * 3.0
    center, chunk = np.full(4, 0.5), as_rows(X).chunk
    counts = B._distance_rank_counts(chunk, center, B.radius_grid(), n_threads)
    assert np.array_equal(counts, B._rank_counts(np.linalg.norm(X - center, axis=1),
                                                 B.radius_grid()))
    columns = B._column_median_counts(chunk, B.center_grid(), n_threads)
    for j, column in enumerate(X.T):
        assert np.array_equal(columns[:, j], B._median_counts(column, B.center_grid()))


def test_events_hold_public_values_only(blobs):
    X, _ = blobs
    first = B.private_bounds(X, budget=BUDGET, rng=np.random.default_rng(2))[1]
    other = B.private_bounds(X[::-1] * 3.0, budget=BUDGET, rng=np.random.default_rng(3))[1]
    assert first == other  # no data-dependent field


@pytest.mark.parametrize("params, match", [
    ({"quantile": 0.0}, "quantile"),
    ({"center": np.zeros(3)}, "center must have shape"),
    ({"budget": B.BoundsBudget(0.0, 0.0, 0.1)}, "epsilon"),
    ({"budget": B.BoundsBudget(0.1, 0.0, 0.0)}, "epsilon"),
    ({"rng": 0}, "Generator"),
])
def test_invalid_parameters_raise_before_randomness(blobs, params, match):
    rng = np.random.default_rng(4)
    state = rng.bit_generator.state
    arguments = {"budget": BUDGET, "rng": rng, **params}
    with pytest.raises(ValueError, match=match):
        B.private_bounds(blobs[0], **arguments)
    assert rng.bit_generator.state == state


def test_one_point_gives_a_radius_at_the_grid_resolution_with_a_warning():
    # Every radius above the gap d between the released centre and the point scores the same
    # (n - q n rows short of nothing), so the 1/R base measure gives P(radius > t d) ~ 1/t:
    # at the grids' resolution (2% of |c|, about 3.7 d here) in about 3 draws of 4, never
    # below d. One seed cannot say that; 20 do.
    X = np.full((5_000, 3), 7.0)
    warned = 0
    for seed in range(20):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            (center, radius), events = B.private_bounds(X, budget=BUDGET,
                                                        rng=np.random.default_rng(seed))
        warned += any("at the resolution of the grids" in str(w.message) for w in caught)
        assert np.all(np.abs(center - 7.0) <= 0.1)  # within the centre grid's 1% of 7
        assert np.linalg.norm(center - 7.0) <= radius
        _assert_within(_ledger_sum(events), BUDGET.cost, epsilon_exact=True)
    assert warned >= 10


def test_a_few_huge_outliers_do_not_move_the_bound(blobs):
    X = blobs[0].copy()
    X[:20] = 1e8
    (center, radius), _ = B.private_bounds(X, budget=BUDGET, rng=np.random.default_rng(6))
    bulk = np.linalg.norm(blobs[0][20:] - center, axis=1)
    assert radius <= B.RADIUS_SAFETY * 1.1 * bulk.max()


def test_data_beyond_the_grid_degrades_with_a_warning():
    X = np.random.default_rng(7).normal(size=(5_000, 2)) + 1e12
    with pytest.warns(UserWarning, match="beyond the public grid"):
        (center, radius), events = B.private_bounds(X, budget=BUDGET, rng=np.random.default_rng(8))
    assert np.all(np.isfinite(center)) and math.isfinite(radius)
    _assert_within(_ledger_sum(events), BUDGET.cost, epsilon_exact=True)


def test_too_few_rows_warns_from_public_values():
    X = np.random.default_rng(9).normal(size=(100, 2))
    with pytest.warns(UserWarning, match="accurate to about"):
        B.private_bounds(X, budget=BUDGET, rng=np.random.default_rng(10))


# ---------------------------------------------------------------------------
# Statistical privacy on worst-case neighbours (with under-noised mutants)
# ---------------------------------------------------------------------------
# Median and rank scores at the median (target t = 200 of n = 400). X_a: 199 values at 0.45,
# one at ``split``, 200 at 1e4; X_b moves one of the 1e4 values to 0.5 (replace-one). The
# score of the candidates in [0.5, split) rises by 1 and of those in [split, 1e4) falls by 1,
# so with p the mass of the falling region under X_a its probability falls by the factor
# (1 - p) e^eps + p (the normaliser moves with the rising region). The split puts p near a
# fifth (2000 for the centre's uniform weights, 4 for the radius's 1/R base measure): a loss
# near 0.85 at epsilon = 1 and 1.8 for the mutants, with counts large enough for tight
# confidence bounds at a few thousand draws (p = 2% reached 0.95, but needed twice the draws
# for the mutants to be caught). The tests run the production steps _private_center and
# _private_radius with their grids patched to a geometric grid of ratio 1.1 over the same
# range (729 centre and 364 radius candidates, 10 times fewer than the production grids, so
# the default suite stays fast): the grids are public, the steps are the same code on any of
# them, and the split's share of the mass does not depend on the ratio.
_REGIONS_BELOW = 0.5
_TEST_CENTER_GRID = B.center_grid(ratio=1.1)
_TEST_RADIUS_GRID = B.radius_grid(ratio=1.1)


def _neighbours(split):
    return (np.r_[np.full(199, 0.45), split, np.full(200, 1e4)],
            np.r_[np.full(199, 0.45), split, 0.5, np.full(199, 1e4)])


def _halved_sensitivity(monkeypatch):
    """The mutant: every exponential mechanism of bounds.py calibrated to half the sensitivity."""
    def under_noised(scores, *, sensitivity, **kwargs):
        return M.exponential_mechanism(scores, sensitivity=sensitivity / 2.0, **kwargs)
    monkeypatch.setattr(B, "exponential_mechanism", under_noised)


def _whole_budget_per_coordinate(monkeypatch):
    """The mutant of review RD-3: every coordinate of the centre gets the whole epsilon_center.

    That is d times the centre's budget, while its event still records
    epsilon_center (``rd_mutant_center_plugin.py`` of the review).
    """
    monkeypatch.setattr(B, "_coordinate_epsilon",
                        lambda epsilon, delta, n_features: (epsilon, False))


def _loss_lower_bound(rows_of, draw, split, n_calls):
    """Lower bound on the loss of the regions (< 0.5, [0.5, split), >= split), and the counts.

    For each neighbour, ``draw(rows_of(values), rng)`` runs ``n_calls`` times
    and returns one released value or several independent ones.
    """
    counts = []
    for seed, values in zip((20, 21), _neighbours(split)):
        rng, rows = np.random.default_rng(seed), rows_of(values)
        released = np.concatenate([np.atleast_1d(draw(rows, rng)) for _ in range(n_calls)])
        regions = np.searchsorted([_REGIONS_BELOW, split], released, side="right")
        counts.append(np.bincount(regions, minlength=3))
    return epsilon_lower_bound(counts[0], counts[0].sum(), counts[1], counts[1].sum()), counts


_CENTER_MUTANTS = {"real": None, "mutant-halved-sensitivity": _halved_sensitivity,
                   "mutant-whole-budget-per-coordinate": _whole_budget_per_coordinate}


def _claimed_coordinate_epsilon(budget, n_coordinates, composition):
    """Epsilon of one coordinate's release, from the centre's (epsilon_c, delta_c) and d only.

    Basic composition: epsilon_c / d. zCDP: each coordinate's epsilon is
    sqrt(8 rho / d) for the rho that is (epsilon_c, delta_c)-DP (module
    docstring). Computed here, not read from the event's per-coordinate
    fields, which a mutant of ``_coordinate_epsilon`` changes.
    """
    if composition == "basic":
        return budget.epsilon_center / n_coordinates
    rho = M.zcdp_rho_for_dp(budget.epsilon_center, budget.delta_center)
    return math.sqrt(8.0 * rho / n_coordinates)


@pytest.mark.parametrize("case", _CENTER_MUTANTS)
@pytest.mark.parametrize("composition, n_features, budget", [
    ("basic", 2, B.BoundsBudget(2.0, 0.0, 1.0)),  # 1 per coordinate
    pytest.param("zcdp", 16, B.BoundsBudget(12.5, 1e-6, 1.0),  # 0.999 each (basic: 0.78)
                 marks=pytest.mark.slow),
], ids=["basic", "zcdp"])
def test_center_empirical_privacy_loss_per_coordinate(monkeypatch, case, composition,
                                                      n_features, budget):
    # Review RD-3: through _private_center, the centre step of every estimator fit with
    # data_radius=None. Every column holds the values of _neighbours, so the changed row moves
    # the scores of all coordinates (the worst case of one row). Each coordinate's release is
    # an exponential mechanism at the epsilon its composition gives it, the claim tested on
    # one coordinate's loss. The coordinates are independent draws of one distribution
    # (separate mechanisms on equal scores): all of them count, 10 000 per neighbour.
    monkeypatch.setattr(B, "center_grid", lambda: _TEST_CENTER_GRID)
    if _CENTER_MUTANTS[case] is not None:
        _CENTER_MUTANTS[case](monkeypatch)
    events = []

    def draw(rows, rng):
        center, event = B._private_center(rows, budget, "replace_one", rng)
        events[:] = [event]
        return center

    bound, counts = _loss_lower_bound(lambda values: as_rows(np.tile(values[:, None], n_features)),
                                      draw, split=2000.0, n_calls=10_000 // n_features)
    event = events[0]
    assert event.epsilon == budget.epsilon_center  # the request, whatever the mutant spends
    if case != "mutant-whole-budget-per-coordinate":
        assert event.details["composition"] == composition
        assert event.delta == budget.delta_center
    claim = _claimed_coordinate_epsilon(budget, n_features, composition)
    assert (bound > claim) == (case != "real"), (bound, claim, counts)
    if case == "real":
        assert bound > 0.4 * claim, (bound, claim, counts)  # near enough the worst case


@pytest.mark.parametrize("mutant", [False, True], ids=["real", "mutant-halved-sensitivity"])
def test_radius_quantile_empirical_privacy_loss(monkeypatch, mutant):
    # Through _private_radius: the distances of 1-D rows to the centre 0 are the values, with
    # the radius step's 1/R base measure and the public quantile 0.5 (q(400) = 0.5 here).
    monkeypatch.setattr(B, "radius_grid", lambda: _TEST_RADIUS_GRID)
    if mutant:
        _halved_sensitivity(monkeypatch)

    def draw(rows, rng):
        radius, _ = B._private_radius(rows, np.zeros(1), 1.0, 0.5, "replace_one", rng)
        return radius / B.RADIUS_SAFETY

    bound, counts = _loss_lower_bound(lambda values: as_rows(values[:, None]), draw, split=4.0,
                                      n_calls=6_000)
    assert (bound > 1.0) == mutant, (bound, counts)
    if not mutant:
        assert bound > 0.4, (bound, counts)


@pytest.mark.slow  # 40 000 draws on the 3 473-point production grid: minutes on 2 cores
@pytest.mark.parametrize("mutant", [False, True], ids=["real", "mutant-halved-sensitivity"])
def test_radius_add_remove_empirical_privacy_loss(monkeypatch, mutant):
    # Add/remove with the quantile lowered for n = 400 at epsilon = 1: the target t(n) = q(n) n
    # is t_a = 377.7 for X_a and t_a - 1 for X_b (X_a without one of its rows at 1e4). X_a:
    # k = floor(t_a - 1) values at 0.45, 2 at ``split``, the rest at 1e4, so the count is
    # k <= t_a - 1 on [0.5, split) (the score rises by 1) and k + 2 >= t_a on [split, 1e4) (it
    # falls by 1); split = 10 puts about 5% of the mass of the 1/R base measure on the falling
    # region. Loss of [split, 1e4): about 0.9, about 1.8 for the mutant. Through
    # _private_radius itself (the distances to the centre 0).
    if mutant:
        _halved_sensitivity(monkeypatch)
    split, n_draws = 10.0, 20_000
    below = math.floor(B.radius_quantile(400, 1.0) * 400 - 1.0)
    a = np.r_[np.full(below, 0.45), split, split, np.full(398 - below, 1e4)][:, None]
    counts = []
    for seed, X in zip((22, 23), (a, a[:-1])):
        rng = np.random.default_rng(seed)
        rows = as_rows(X)
        released = np.array([B._private_radius(rows, np.zeros(1), 1.0, 0.99, "add_remove", rng)[0]
                             for _ in range(n_draws)]) / B.RADIUS_SAFETY
        regions = np.searchsorted([_REGIONS_BELOW, split], released, side="right")
        counts.append(np.bincount(regions, minlength=3))
    bound = epsilon_lower_bound(counts[0], n_draws, counts[1], n_draws)
    assert (bound > 1.0) == mutant, (bound, counts)


# ---------------------------------------------------------------------------
# Estimators: the default fit is private
# ---------------------------------------------------------------------------

DEFAULT_ESTIMATORS = [
    PrivateStableKMeans(4), PrivateStableKMedian(4), PrivateHighDimKMeans(4),
    PrivateHighDimKMedian(4), FederatedPrivateKMeans(4), KTupleClusterer(4),
    PrivateGaussianMixture(4), SampleAggregateStableKMeans(4),
]


@pytest.mark.filterwarnings("ignore:.*no X_server was given")
@pytest.mark.parametrize("estimator", DEFAULT_ESTIMATORS, ids=lambda e: type(e).__name__)
def test_default_fit_is_private_and_within_the_request(blobs, estimator):
    X, _ = blobs
    accountant = BudgetAccountant()
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)
        est = estimator.set_params(accountant=accountant, random_state=0).fit(X)
    assert est.privacy_spent_["proven"] is True
    assert est.data_radius is None and est.data_center is None  # parameters unchanged
    labels = [e.label for e in est.privacy_ledger_]
    assert labels[:2] == ["bounds/center", "bounds/radius"]
    _assert_within(_ledger_sum(est.privacy_ledger_[:2]), BUDGET.cost, epsilon_exact=True)
    spent = _ledger_sum(est.privacy_ledger_)
    _assert_within(spent, (1.0, 1e-6))
    assert accountant.total() == pytest.approx(spent)
    assert np.allclose(est.data_center_, np.median(X, axis=0), atol=1.5)
    distances = np.linalg.norm(X - est.data_center_, axis=1)
    assert np.quantile(distances, 0.97) <= est.data_radius_ <= 2 * distances.max()


def test_noisy_centers_methods_need_no_bound():
    for estimator in (KTupleClusterer(2, method="noisy_centers"),
                      PrivateGaussianMixture(2, tuple_method="noisy_centers")):
        assert not estimator._needs_radius(None)


def test_exact_bound_only_by_explicit_choice(blobs):
    X, _ = blobs
    with pytest.warns(PrivacyLeakWarning, match="data_radius='data'"):
        est = PrivateStableKMeans(4, data_radius="data", random_state=0).fit(X)
    assert est.data_radius == "data"
    assert all(not e.label.startswith("bounds/") for e in est.privacy_ledger_)


def test_invalid_parameter_raises_before_the_bound_is_spent(blobs):
    accountant = BudgetAccountant()
    est = PrivateStableKMeans(4, budget_split={"nope": 1.0}, accountant=accountant)
    with pytest.raises(ValueError, match="budget_split"):
        est.fit(blobs[0])
    assert accountant.total() == (0.0, 0.0) and not hasattr(est, "privacy_spent_")


def test_too_few_rows_for_the_reduced_budget_raise_before_randomness():
    # With 10% of epsilon spent on the bound, the k-tuple test needs more tuples than at the
    # full budget: a public fact, raised before any randomness or spend.
    accountant = BudgetAccountant()
    X = np.random.default_rng(11).normal(size=(2_000 * 4, 1))
    est = KTupleClusterer(2, method="averages", n_tuples=2_000, fallback_share=0.0,
                          accountant=accountant)
    with pytest.raises(ValueError, match="tuples are too few"):
        est.fit(X)
    assert accountant.total() == (0.0, 0.0)


@pytest.mark.parametrize("case", ["one_point", "outliers", "far_away"])
def test_degenerate_data_degrades_gracefully(blobs, case):
    X = blobs[0][:5_000].copy()
    if case == "one_point":
        X[:] = 3.0
    elif case == "outliers":
        X[:5] = 1e7
    else:
        X += 1e11
    accountant = BudgetAccountant()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("error", PrivacyLeakWarning)
        est = PrivateStableKMeans(4, accountant=accountant, random_state=0).fit(X)
    _assert_within(_ledger_sum(est.privacy_ledger_), (1.0, 1e-6))
    assert accountant.total() == pytest.approx(_ledger_sum(est.privacy_ledger_))
    assert est.privacy_spent_["proven"] and np.all(np.isfinite(est.cluster_centers_))


def test_too_few_rows_for_the_centre_fall_back_to_the_origin():
    # d = 40, n = 2000: the centre needs center_min_rows rows (a public value), so the bound
    # is centred at the origin and the whole share goes to the radius.
    X = np.random.default_rng(12).normal(size=(2_000, 40)) + 2.0
    budget = B.BoundsBudget.of_fit(1.0, 1e-6, estimate_center=True)
    assert B.center_min_rows(budget, 40) > 2_000
    accountant = BudgetAccountant()
    with pytest.warns(UserWarning, match="too few to locate a centre"):
        est = PrivateHighDimKMeans(2, accountant=accountant, random_state=0).fit(X)
    assert np.array_equal(est.data_center_, np.zeros(40))
    assert [e.label for e in est.privacy_ledger_][0] == "bounds/radius"
    assert est.privacy_ledger_[0].epsilon == pytest.approx(0.1)
    _assert_within(_ledger_sum(est.privacy_ledger_), (1.0, 1e-6))
    # Here (1 - q) n epsilon_r / 2 = 1 nat separates the quantile from the radii above all
    # rows, so the radius overshoots; the 1/R base measure makes an overshoot by a factor t
    # about 1/t as likely (seed fixed).
    norms = np.linalg.norm(X, axis=1)
    assert np.quantile(norms, 0.9) <= est.data_radius_ <= 4 * norms.max()


# ---------------------------------------------------------------------------
# The centre switch reads n only where n is public (review R6a, F2)
# ---------------------------------------------------------------------------


def _needed_rows(n_features):
    budget = B.BoundsBudget.of_fit(1.0, 1e-6, estimate_center=True, n_features=n_features)
    return B.center_min_rows(budget, n_features)


def _old_switch(n_samples, n_features, epsilon, delta, *, neighbouring, **kwargs):
    """Mutant: the switch on the exact n under any relation (the code before R6a F2)."""
    return B.plan_bounds(n_samples, n_features, epsilon, delta, **kwargs)


def _plans_and_warnings(plan, rows, n_features, neighbouring):
    out = []
    for n_samples in rows:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            budget, center = plan(n_samples, n_features, 1.0, 1e-6, neighbouring=neighbouring)
        out.append((budget, None if center is None else tuple(center),
                    [str(w.message) for w in caught]))
    return out


@pytest.mark.parametrize("plan, alike", [(B.plan_bounds, True), (_old_switch, False)],
                         ids=["real", "mutant-switch-on-n"])
@pytest.mark.parametrize("n_features", [2, 64])
def test_add_remove_neighbours_at_the_centre_threshold_plan_alike(plan, alike, n_features):
    # Under add/remove, n = center_min_rows and one row fewer are neighbours: the plan (the
    # budget split, whether the centre is released, the warning) must not tell them apart.
    needed = _needed_rows(n_features)
    first, second = _plans_and_warnings(plan, (needed, needed - 1), n_features, "add_remove")
    assert (first == second) is alike
    if alike:
        assert first[1] is None and first[0].epsilon_center > 0  # the centre is estimated
        assert str(needed) in first[2][0] and "add/remove" in first[2][0]


def test_replace_one_keeps_the_switch_on_the_public_n():
    needed = _needed_rows(2)
    (at, center_at, _), (below, center_below, warned) = _plans_and_warnings(
        B.plan_bounds, (needed, needed - 1), 2, "replace_one")
    assert center_at is None and at.epsilon_center > 0
    assert center_below == (0.0, 0.0) and below.epsilon_center == 0
    assert "too few to locate a centre" in warned[0]


def test_add_remove_fits_at_the_centre_threshold_release_alike():
    # The review's pair: rows near (1000, 1000), n = center_min_rows and one row removed. The
    # old switch released a centre near (1000, 1000) for one and the origin (radius > 3000)
    # for the other: disjoint outputs. Now both release a centre, with the same events.
    needed = _needed_rows(2)
    X = np.array([1000.0, 1000.0]) + np.random.default_rng(0).standard_normal((needed, 2))
    fits = []
    for rows in (X, X[1:]):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fits.append(PrivateStableKMedian(2, neighbouring="add_remove", random_state=0,
                                             accountant=BudgetAccountant()).fit(rows))
    bounds_events = [[(e.label, e.mechanism, e.epsilon, e.delta, e.scale, e.neighbouring)
                      for e in est.privacy_ledger_ if e.label.startswith("bounds/")] for est in fits]
    assert bounds_events[0] == bounds_events[1]
    assert [e[0] for e in bounds_events[0]] == ["bounds/center", "bounds/radius"]
    for est in fits:
        assert np.all(np.abs(est.data_center_ - 1000.0) <= 20.0) and est.data_radius_ < 50.0


@pytest.mark.parametrize("neighbouring", ["add_remove", "replace_one"])
def test_add_remove_events_and_warnings_do_not_tell_n(neighbouring):
    # n = 600 and 599 at epsilon = 1: the radius quantile q(n) is below its maximum and the
    # rank-error warning fires under replace-one, where n is public and both may read it (the
    # control: it shows that the comparison sees n). Under add/remove, the ledger (a fitted
    # attribute) and the warnings of the neighbours must be the same.
    X = np.random.default_rng(13).normal(size=(600, 2)) + 5.0
    outputs = []
    for rows in (X, X[1:]):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _, events = B.private_bounds(rows, budget=BUDGET, rng=np.random.default_rng(0),
                                         neighbouring=neighbouring)
        outputs.append((events, [str(w.message) for w in caught]))
    assert (outputs[0] == outputs[1]) is (neighbouring == "add_remove")
    if neighbouring == "add_remove":
        assert "quantile" not in outputs[0][0][-1].details
        assert outputs[0][0][-1].details["quantile_max"] == 0.99


def _fit_with_warning_as_error(estimator, X, pattern):
    """Fit with the warnings matching ``pattern`` made errors; return the raised warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warnings.filterwarnings("error", message=pattern)
        with pytest.raises(UserWarning, match=pattern) as raised:
            estimator.fit(X)
    return raised.value


@pytest.mark.parametrize("case", ["degraded_bound", "moved_r_min"])
def test_warnings_at_the_released_bound_come_after_the_charged_fit(case):
    # Review R7, M1: the bound's utility warning and the inner plan's warnings (here r_min
    # moved into the released bound's range) were given inside the private step; made errors,
    # they turned the charged fit into an unproven 'private_step_failed' failure.
    accountant = BudgetAccountant(epsilon=100, delta=1e-3)
    if case == "degraded_bound":
        X = np.tile([[3.0, -2.0]], (5_000, 1))  # one point: the radius at the grids' resolution
        est = PrivateStableKMeans(2, random_state=0, accountant=accountant)
        pattern = "private bounds of PrivateStableKMeans"
    else:
        X = np.random.default_rng(14).normal(size=(2_000, 2))
        est = KTupleClusterer(1, r_min=5.0, random_state=0, accountant=accountant)
        pattern = r"KTupleClusterer: r_min=5\.0 is outside"
    _fit_with_warning_as_error(est, X, pattern)
    assert est.status_ != "failure" and est.privacy_spent_["proven"] is True
    assert "private_step_failed" not in [e.mechanism for e in est.privacy_ledger_]
    assert est.cluster_centers_ is not None and np.isfinite(est.data_radius_)
    assert accountant.total() == pytest.approx(_ledger_sum(est.privacy_ledger_)) != (0.0, 0.0)


def test_a_leak_warning_made_an_error_refuses_the_private_bound_fit_before_any_spend():
    # Review R7, M1: the mixture's sigma_min=None PrivacyLeakWarning, made an error, refused
    # the fit before any spend with a public data_radius, but with data_radius=None it was
    # first given inside the private step: charged in full, an unproven failure.
    X = np.random.default_rng(15).normal(size=(4_000, 2))
    for radius in (30.0, None):
        accountant = BudgetAccountant()
        est = PrivateGaussianMixture(2, sigma_min=None, data_radius=radius, random_state=0,
                                     accountant=accountant)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            warnings.simplefilter("error", PrivacyLeakWarning)
            with pytest.raises(PrivacyLeakWarning, match="sigma_min or sigma_max is None"):
                est.fit(X)
        assert accountant.total() == (0.0, 0.0) and not hasattr(est, "status_")


def test_an_extreme_row_gives_the_same_bound_under_any_numpy_error_handling():
    # Review R7, M2: the radius step's norm of a finite row of 1e200 overflowed outside any
    # np.errstate: a RuntimeWarning for this X and not for its neighbour, and under
    # np.seterr(over="raise") a FloatingPointError after the centre was drawn.
    X = np.random.default_rng(16).normal(size=(5_000, 2))
    X[0] = 1e200
    budget = B.BoundsBudget.of_fit(1.0, 1e-6, estimate_center=True, n_features=2)
    releases = []
    for handling in ("ignore", "warn", "raise"):
        with warnings.catch_warnings(record=True) as caught, np.errstate(all=handling):
            warnings.simplefilter("always")
            (center, radius), events = B.private_bounds(X, budget=budget,
                                                        rng=np.random.default_rng(0))
        assert not [w for w in caught if issubclass(w.category, RuntimeWarning)]
        releases.append((tuple(center), radius, [e.label for e in events]))
    assert releases[0] == releases[1] == releases[2]
    assert releases[0][2] == ["bounds/center", "bounds/radius"]


@pytest.mark.parametrize("estimator", [PrivateStableKMeans(2), PrivateStandardScaler()],
                         ids=lambda e: type(e).__name__)
def test_a_refit_with_a_public_bound_keeps_no_released_centre(estimator):
    # Review R7, L1: data_center_ was set on the private-bound path only, so a refit with a
    # public data_radius kept the first fit's released centre (its ledger had no centre).
    rng = np.random.default_rng(17)
    X = rng.normal(loc=50.0, size=(5_000, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        estimator.set_params(random_state=0, accountant=BudgetAccountant()).fit(X)
        assert np.allclose(estimator.data_center_, 50.0, atol=1.5)
        estimator.set_params(data_radius=10.0).fit(X - 50.0)
        np.testing.assert_array_equal(estimator.data_center_, [0.0, 0.0])
        estimator.set_params(data_center=[1.0, -1.0]).fit(X - 50.0)
        np.testing.assert_array_equal(estimator.data_center_, [1.0, -1.0])
