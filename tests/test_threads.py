"""Tests of the in-fit thread helpers (skdpcluster.utils._threads) and of the fits that use them."""

import threading
import warnings

import numpy as np
import pytest

from skdpcluster import BudgetAccountant, PrivateStableKMeans, PrivateStableKMedian
from skdpcluster.datasets import make_separated_mixture
from skdpcluster.utils._compat import single_threaded
from skdpcluster.utils._threads import fit_threads, ordered_map


def test_ordered_map_keeps_the_item_order_on_many_threads():
    def slow_first(item):  # the first items finish last
        threading.Event().wait(0.002 * (10 - item))
        return item * item

    assert ordered_map(slow_first, range(10), 4) == [item * item for item in range(10)]


@pytest.mark.parametrize("n_threads", [1, 0])
def test_ordered_map_on_one_thread_runs_in_the_caller(n_threads):
    caller = threading.get_ident()
    assert ordered_map(lambda item: threading.get_ident(), range(3), n_threads) == [caller] * 3


def test_ordered_map_raises_the_first_failing_item_in_the_caller():
    def fail_on_two(item):
        if item == 2:
            raise ValueError("item 2")
        return item

    with pytest.raises(ValueError, match="item 2"):
        ordered_map(fail_on_two, range(5), 2)


@pytest.mark.parametrize("handling", ["ignore", "raise"])
def test_ordered_map_threads_compute_under_the_callers_floating_point_handling(handling):
    # A worker thread starts from NumPy's default ("warn"): before the fix an overflow on
    # a row in a pool thread warned (or did not raise) whatever the fit had set.
    def over(item):
        return np.geterr()["over"], threading.get_ident()

    with np.errstate(over=handling):
        results = ordered_map(over, range(4), 2)
    assert [state for state, _ in results] == [handling] * 4
    assert len({thread for _, thread in results} - {threading.get_ident()}) >= 1


def test_fit_threads_follows_the_openmp_limits():
    assert fit_threads() >= 1
    with single_threaded():
        assert fit_threads() == 1


def _threaded_fit(estimator, X, n_threads, monkeypatch):
    """A fit whose passes run on ``n_threads`` threads (``fit_threads``), releases recorded."""
    import skdpcluster.cluster._stable as stable

    monkeypatch.setattr(stable, "fit_threads", lambda: n_threads)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return estimator(accountant=BudgetAccountant(10, 1e-3)).fit(X)


@pytest.mark.parametrize("estimator", [
    lambda **kw: PrivateStableKMedian(4, data_radius=60.0, random_state=0, **kw),
    lambda **kw: PrivateStableKMedian(2, data_radius=60.0, random_state=1,
                                      neighbouring="add_remove", median_domain="global", **kw),
    lambda **kw: PrivateStableKMeans(4, data_radius=60.0, random_state=0, **kw),
])
def test_a_fit_on_one_thread_releases_the_same_bits_as_the_default_fit(estimator, monkeypatch):
    """Issue #17: the in-memory passes run on ``fit_threads()`` threads with the same releases.

    The default fit (scikit-learn's OpenMP threads, as ``KMeans``), one under
    ``single_threaded()`` (one thread) and one on 4 threads give the same bits
    (the 1-median steps on threads from one block of values per thread).
    """
    from skdpcluster.averaging import one_median

    monkeypatch.setattr(one_median, "_MEDIAN_THREAD_BLOCKS", 1)
    X = make_separated_mixture(70_000, n_clusters=4, n_features=16, separation=10,
                               random_state=7)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        default = estimator(accountant=BudgetAccountant(10, 1e-3)).fit(X)
        with single_threaded():
            alone = estimator(accountant=BudgetAccountant(10, 1e-3)).fit(X)
    many = _threaded_fit(estimator, X, 4, monkeypatch)
    for fitted in (alone, many):
        assert np.array_equal(fitted.cluster_centers_, default.cluster_centers_)
        assert fitted.selected_ == default.selected_
        for name, centers in default.candidate_centers_.items():
            assert np.array_equal(fitted.candidate_centers_[name], centers)
        assert np.array_equal(fitted.labels_, default.labels_)
        assert fitted.privacy_spent_ == default.privacy_spent_


@pytest.mark.parametrize("estimate_cost", [False, True])
def test_a_stable_fit_reads_its_threads_before_limiting_them(estimate_cost):
    """Issue #17: the plan records ``fit_threads()`` (read outside ``single_threaded()``), so the
    main fit of ``estimate_cost=True``, which runs inside the limit, still gets the threads."""
    X = np.random.default_rng(0).normal(size=(500, 3))
    plan = PrivateStableKMedian(2, data_radius=5.0, estimate_cost=estimate_cost)._plan(X)
    values = plan.values["cost_main_plan"].values if estimate_cost else plan.values
    assert values["n_threads"] == fit_threads()
    with single_threaded():
        assert PrivateStableKMeans(2, data_radius=5.0)._plan(X).values["n_threads"] == 1


def test_a_nested_ordered_map_runs_in_its_pool_thread_instead_of_waiting():
    """A task of the pool that maps again (both pools have 2 threads) would wait forever on
    threads that all wait; the nested map runs in the calling pool thread instead."""
    def inner(item):
        return ordered_map(lambda j: (item, j, threading.get_ident()), range(3), 2)

    results = ordered_map(inner, range(4), 2)
    assert [[(i, j) for i, j, _ in row] for row in results] == [
        [(i, j) for j in range(3)] for i in range(4)]
    assert all(len({ident for *_, ident in row}) == 1 for row in results)


def _map_in_a_pool_thread(_):
    return ordered_map(lambda item: item * 2, range(6), 2)


@pytest.mark.skipif(not hasattr(__import__("os"), "register_at_fork"), reason="no fork")
def test_a_forked_child_maps_on_threads_after_the_parent_did():
    """A child made by fork inherits the parent's pool object but not its threads: without a
    fresh pool in the child, its first map waited forever (review of issue #17)."""
    import multiprocessing

    assert ordered_map(lambda item: item, range(4), 2) == [0, 1, 2, 3]  # the parent's pool
    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert pool.apply_async(_map_in_a_pool_thread, (0,)).get(timeout=60) == [
            0, 2, 4, 6, 8, 10]


def test_nothing_of_a_failed_map_runs_on_after_the_caller_has_the_error():
    """As a loop stops at its first error: queued items are cancelled, running ones ended."""
    started, finished = [], []

    def task(item):
        started.append(item)
        if item == 0:
            raise ValueError("item 0")
        threading.Event().wait(0.05)
        finished.append(item)

    with pytest.raises(ValueError, match="item 0"):
        ordered_map(task, range(8), 2)
    running_after_the_error = sorted(set(started) - set(finished) - {0})
    threading.Event().wait(0.2)
    assert running_after_the_error == [] and len(started) < 8
    assert sorted(finished) == sorted(set(started) - {0})
