"""SampleAggregateStableKMeans: group-privacy aggregation, accounting, validation, utility."""

import math
import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.cluster import KMeans

from dp_stats import event_counts, mu_lower_bound
from skdpcluster import (
    BudgetAccountant,
    BudgetExceededError,
    SampleAggregateStableKMeans,
    UtilityWarning,
)
from skdpcluster.cluster import _sample_aggregate, _stable, _stable_init
from skdpcluster.cluster._stable_init import GRID_LEVELS, GRID_SHARES
from skdpcluster.datasets import make_separated_mixture


_REAL_RELEASE = _stable_init.zcdp_gaussian_mechanism


class _FirstRelease(Exception):
    """Raised by the spy to stop the aggregation after its first release."""


def _first_count_release(monkeypatch, points, rho, n_runs, seed):
    """The real first release of the aggregation (grid counts at g = 2), ``n_runs`` times."""
    captured = []

    def spy(value, **kwargs):
        noisy, event = _REAL_RELEASE(value, **kwargs)
        captured.append(noisy)
        raise _FirstRelease

    monkeypatch.setattr(_stable_init, "zcdp_gaussian_mechanism", spy)
    # The grid's shift is public randomness: the claim holds for every shift, and shift 0
    # puts the chunk centres' move across the boundary between cells 0 and 1.
    monkeypatch.setattr(_stable_init.GridInitializer, "_grid_shift",
                        staticmethod(lambda n_dims, data_radius, rng: np.zeros(n_dims)))
    rng = np.random.default_rng(seed)
    for _ in range(n_runs):
        with pytest.raises(_FirstRelease):
            _sample_aggregate.aggregate_chunk_centers(points, 2, rho=rho, data_radius=1.0,
                                                      neighbouring="replace_one", rng=rng)
    return np.array(captured)


@pytest.mark.parametrize("factor, should_pass", [
    pytest.param(1.0, True, id="real"),
    pytest.param(0.25, False, id="mutant-half-sensitivity"),
])
def test_aggregation_covers_a_whole_chunk(monkeypatch, factor, should_pass):
    """One row moves the k = 2 centres of its chunk: the g = 2 counts change by (-2, +2).

    Worst case: both centres of one chunk go from the cell [-1, 0) to [0, 1].
    Claim (rho of that release for one row): the counts get 0.12 of rho over
    the 6 grid levels, mu = sqrt(2 rho_release). The statistic n_1 - n_0 sees
    the whole L2 change. The mutant uses k^2 / 4 (the sensitivity k / 2).
    """
    original = _sample_aggregate._group_factor
    monkeypatch.setattr(_sample_aggregate, "_group_factor", lambda k: factor * original(k))
    rho = 2.0
    base = np.r_[np.full(40, -0.5), np.full(40, 0.5)][:, None]
    a = np.r_[base, [[-0.9], [-0.8]]]
    b = np.r_[base, [[0.8], [0.9]]]
    n_runs = 40_000
    samples = [_first_count_release(monkeypatch, points, rho, n_runs, seed)
               for seed, points in ((1, a), (2, b))]
    statistic = [s[:, 1] - s[:, 0] for s in samples]
    scale = np.std(statistic[0])
    edges = np.mean(statistic[0]) + np.linspace(-3.0, 7.0, 51) * scale
    bound = mu_lower_bound(event_counts(statistic[0], edges), n_runs,
                           event_counts(statistic[1], edges), n_runs)
    claim = math.sqrt(2.0 * rho * GRID_SHARES["counts"] / len(GRID_LEVELS))
    assert (bound <= claim) is should_pass, (bound, claim)


@pytest.fixture(scope="module")
def mixture():
    return make_separated_mixture(300_000, n_clusters=4, n_features=4, separation=10 / 2**0.5,
                                  random_state=0)[0]


def test_ledger_and_group_privacy_accounting(mixture):
    accountant = BudgetAccountant()
    est = SampleAggregateStableKMeans(n_clusters=4, epsilon=2.0, data_radius=20.0,
                                      accountant=accountant, random_state=0).fit(mixture)
    assert est.initializer_info_["n_chunks"] == 300_000 // (50 * 4)
    aggregation = [e for e in est.privacy_ledger_ if e.label.startswith("sample_aggregate")]
    assert aggregation and all("rho x k^2" in e.details["group_privacy"] for e in aggregation)
    assert math.fsum(e.rho for e in aggregation) <= est.budget_["initializer"]["rho"] * (1 + 1e-9)
    total = est.privacy_ledger_[-1]
    assert total.rho == pytest.approx(math.fsum(e.rho for e in est.privacy_ledger_[:-1]))
    assert est.privacy_spent_["epsilon"] <= 2.0 and accountant.total()[0] <= 2.0
    assert est.selected_ == "core"  # selection="none": the thesis releases the core candidate


def test_recovers_the_optimum_with_enough_rows(mixture):
    """At n = 3e5, epsilon = 4 the cost is within 1% of non-private k-means (measured 1.00001)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", UtilityWarning)  # enough heavy cells: nothing to warn about
        est = SampleAggregateStableKMeans(n_clusters=4, epsilon=4.0, data_radius=20.0,
                                          random_state=0, accountant=BudgetAccountant())
        est.fit(mixture)
    assert not est.quality_["heavy_cells_short"] and est.quality_["n_heavy_cells"] >= 4
    reference = KMeans(4, n_init=3, random_state=0).fit(mixture)
    assert est.score(mixture) / reference.score(mixture) < 1.01


def test_too_many_chunks_raise_before_spending():
    X = np.random.default_rng(0).normal(size=(100, 2))
    accountant = BudgetAccountant()
    with pytest.raises(ValueError, match="fewer than n_clusters=4 rows per chunk"):
        SampleAggregateStableKMeans(n_clusters=4, n_chunks=50, data_radius=5.0,
                                    accountant=accountant).fit(X)
    assert accountant.ledger == []


def test_auto_chunks_on_small_data_is_one_chunk():
    agg = _sample_aggregate.SampleAggregateInitializer()
    assert agg.resolved_chunks(150, 4) == 1 and agg.resolved_chunks(400, 4) == 2


# -- honest utility signals (issue #14) -----------------------------------------------------------

def _benchmark_mixture(n):
    """The mixture of ``benchmarks/bench_local.py`` (k = d = 4, means 10/sqrt(2) apart)."""
    return make_separated_mixture(n, n_clusters=4, n_features=4, separation=10 / 2**0.5,
                                  random_state=0)[0]


def test_short_aggregation_warns_and_reports_it_in_quality():
    """At n = 2e4 (benchmarks/bench_local.py's mixture) it said nothing but 'success'."""
    X = _benchmark_mixture(20_000)
    with pytest.warns(UtilityWarning) as record:
        est = SampleAggregateStableKMeans(n_clusters=4, data_radius=20.0, random_state=0,
                                          accountant=BudgetAccountant()).fit(X)
    messages = [str(w.message) for w in record if w.category is UtilityWarning]
    assert any("found 0 heavy grid cells for n_clusters=4" in m for m in messages)
    assert all("About " in m and "rows" in m for m in messages)
    assert est.status_ == "success"  # no private test, no reserved share: a warned success
    assert est.quality_["n_heavy_cells"] == est.initializer_info_["n_heavy_cells"] == 0
    assert est.quality_["heavy_cells_short"] and est.quality_["rows_suggested"] > 2e5
    assert not any(w.category is UserWarning for w in record)  # the grid's generic text is replaced


def test_public_heavy_cell_warning_comes_before_spending():
    accountant = BudgetAccountant(epsilon=0.5)
    match = r"with 20000 rows there are 100 chunks.*About \d+ rows"
    with pytest.warns(UtilityWarning, match=match):
        with pytest.raises(BudgetExceededError):
            SampleAggregateStableKMeans(n_clusters=4, data_radius=20.0,
                                        accountant=accountant).fit(_benchmark_mixture(20_000))
    assert accountant.ledger == []



def test_the_advice_for_a_fixed_number_of_chunks_is_more_chunks_not_more_rows():
    # Before the fix, n_chunks=10 was told "about 254631 rows would help", and a fit on that
    # many rows still had 10 chunks and the same warning.
    auto = SampleAggregateStableKMeans(n_clusters=3, data_radius=20.0)
    fixed = clone(auto).set_params(n_chunks=10)
    rho_init = _stable.plan_budget("zcdp", auto._fractions("zcdp", False), 1.0,
                                   1e-6).initializer["rho"]
    threshold, chunks, rows = auto._heavy_cell_need(2, rho_init)
    assert chunks == math.ceil(_stable.HEAVY_CELL_MARGIN * threshold)
    assert rows == chunks * _sample_aggregate.ROWS_PER_CLUSTER * 3
    with warnings.catch_warnings():
        warnings.simplefilter("error", UtilityWarning)
        auto._warn_if_noise_dominates(rows, 2)  # "auto" at the suggested rows: enough chunks
    with pytest.warns(UtilityWarning, match=rf"About {chunks} chunks would help.*"
                                            rf"n_chunks='auto' with about {rows} rows"):
        fixed._warn_if_noise_dominates(rows, 2)


def test_default_radius_is_released_privately_as_documented():
    """data_radius=None: a private centre and radius, proven, no leak (the docstring said leak)."""
    from skdpcluster import PrivacyLeakWarning

    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(-8, 1, (2000, 2)), rng.normal(8, 1, (2000, 2))])
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)
        est = SampleAggregateStableKMeans(n_clusters=2, random_state=0,
                                          accountant=BudgetAccountant()).fit(X)
    assert est.privacy_spent_["proven"] and np.isfinite(est.data_radius_)
    assert [e.label for e in est.privacy_ledger_[:2]] == ["bounds/center", "bounds/radius"]
    doc = " ".join(SampleAggregateStableKMeans.__doc__.split())
    assert "releases a centre and a radius privately" in doc
    assert "computed from the data with a" not in doc
