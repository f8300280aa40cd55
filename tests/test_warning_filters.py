"""A fit never changes the process-wide warning filters (thread safety; review task H11).

``warnings.catch_warnings`` saves and restores the process-wide ``warnings.filters``
without a lock: two fits in two threads interleave so that the process is left with
the filters one of them installed ("ignore"), and every later warning of the
process, ``PrivacyLeakWarning`` included, is dropped. The library's own warnings are
collected per context (``skdpcluster.utils._warnings.collected_warnings``), and the
third-party code a fit runs shares one lock-protected silence.
"""

import contextlib
import sys
import threading
import types
import warnings

import numpy as np
import pytest
from sklearn.cluster import KMeans

from skdpcluster import (
    BudgetAccountant,
    FederatedPrivateKMeans,
    KTupleClusterer,
    PrivateStableKMeans,
)
from skdpcluster.datasets import make_separated_mixture
from skdpcluster.exceptions import PrivacyLeakWarning, UtilityWarning
from skdpcluster.utils._threads import ordered_map
from skdpcluster.utils._warnings import warn_user


class _WatchedWarnings(types.ModuleType):
    """The ``warnings`` module's class while watched: every ``warnings.filters = ...`` is
    recorded (``catch_warnings`` assigns a copy on entry and the saved list on exit)."""

    def __setattr__(self, name, value):
        super().__setattr__(name, value)
        if name == "filters":
            _WatchedWarnings.on_write()


class _WatchedList(list):
    """``warnings.filters`` while watched: every in-place change is recorded, and a copy
    (``catch_warnings`` copies with ``filters[:]``) is watched too."""

    def __getitem__(self, index):
        item = list.__getitem__(self, index)
        return _WatchedList(item) if isinstance(index, slice) else item


def _record_mutation(name):
    def mutate(self, *args, **kwargs):
        result = getattr(list, name)(self, *args, **kwargs)
        _WatchedWarnings.on_write()
        return result
    return mutate


for _name in ("insert", "append", "remove", "pop", "clear", "extend", "sort", "reverse",
              "__setitem__", "__delitem__", "__iadd__"):
    setattr(_WatchedList, _name, _record_mutation(_name))


@contextlib.contextmanager
def _watched_filters(on_write=None):
    """Record every replacement or in-place change of ``warnings.filters`` in the block.

    Yields the list of writes, each ``(module, line)`` of the code that made it (the
    first frame outside ``warnings``, ``contextlib`` and this file): scikit-learn's
    ``check_array`` writes too (its own ``catch_warnings``), so the tests keep the writes
    of ``skdpcluster`` (:func:`_ours`). ``on_write``, if given, is called with the
    ``(module, line)`` after every write. On exit, the filters a fit left behind stay
    (pytest restores its own after the test).
    """
    module = sys.modules["warnings"]
    writes = []

    def record():
        frame = sys._getframe(1)
        while frame.f_globals.get("__name__") in ("warnings", "contextlib", __name__):
            frame = frame.f_back
        writes.append((frame.f_globals.get("__name__"), frame.f_lineno))
        if on_write is not None:
            on_write(writes[-1])

    original = module.filters
    watched = module.filters = _WatchedList(original)
    _WatchedWarnings.on_write = staticmethod(record)
    module.__class__ = _WatchedWarnings
    try:
        yield writes
    finally:
        module.__class__ = types.ModuleType
        module.filters = original if module.filters is watched else list(module.filters)


def _ours(writes):
    return [write for write in writes if write[0].startswith("skdpcluster")]


def _data():
    X, _ = make_separated_mixture(n_samples=3000, n_clusters=4, n_features=2,
                                  separation=30.0, random_state=0)
    return X


_FITS = {
    # data_radius=None: the inner plans' warnings are collected (they were recorded with
    # catch_warnings(record=True)); the grid's k-means on the coreset ran under catch_warnings.
    "stable_grid": lambda X: PrivateStableKMeans(
        4, epsilon=1.0, initializer="grid", data_radius=None, random_state=0,
        accountant=BudgetAccountant()).fit(X),
    # A base_estimator: its trial fit on the server points ran under catch_warnings; a
    # third-party fit, it now holds the shared silence (skdpcluster.utils._warnings).
    "federated": lambda X: FederatedPrivateKMeans(
        4, epsilon=1.0, data_radius=None, random_state=0, base_estimator=KMeans(n_init=2),
        accountant=BudgetAccountant()).fit(X, X_server=X[:200]),
    # fallback_share="auto": the tuple path's probe plan ran under catch_warnings.
    "ktuple": lambda X: KTupleClusterer(
        4, epsilon=1.0, data_radius=30.0, random_state=0, accountant=BudgetAccountant()).fit(X),
}


@pytest.mark.parametrize("name", sorted(_FITS))
def test_a_fit_neither_replaces_nor_changes_the_warning_filters(name):
    """Deterministic detector of the race: while the fit runs, the ``warnings`` module's
    class records every assignment ``warnings.filters = ...`` (what ``catch_warnings`` does
    on entry, with a copy, and on exit, with the saved list), and ``warnings.filters`` is a
    list subclass recording every in-place change (``simplefilter``'s insert). A fit that
    writes nothing cannot leave another thread's fit with the wrong filters; each write the
    fit made before (a ``catch_warnings`` per site) is one a second thread could interleave
    with. The shared silence (a lock-protected span saved by the first fit in and restored
    by the last out) is the one writer allowed, for third-party fits only: the federated
    base_estimator's trial fit here; the other fits write nothing. scikit-learn's own
    ``check_array`` writes are left out (``_ours``)."""
    X = _data()
    with _watched_filters() as writes:
        _FITS[name](X)
    shared = [write for write in _ours(writes) if write[0] == "skdpcluster.utils._warnings"]
    assert _ours(writes) == shared and (name == "federated") == bool(shared)


def test_two_fits_in_two_threads_leave_the_filters_and_the_library_warnings_alone():
    """Two KTupleClusterer fits in two threads, forced into the interleaving that broke the
    process (the filters watched as in the test above; the forcing is done at the writes):
    A enters a ``catch_warnings`` (a copy of ``warnings.filters``) and puts "ignore" in
    front, then waits until B has done the same (B saves A's filters); B waits until A has
    left its scope (A's third write: its saved filters back). B's exit then restores A's
    copy, with A's "ignore" in front: every later warning of the process was dropped. A
    Barrier starts both fits together. Now a fit writes nothing, so no order is forced;
    the filters after are the filters before, and a PrivacyLeakWarning is shown (recorded
    under the process's own filters: ``pytest.warns`` puts "always" in front and would hide
    a left-over "ignore")."""
    X = _data()
    start = threading.Barrier(2)
    first_writer, b_entered, a_left = [], threading.Event(), threading.Event()
    seen = {}

    def on_write(origin):
        if not origin[0].startswith("skdpcluster"):
            return
        me = threading.get_ident()
        seen[me] = seen.get(me, 0) + 1
        if not first_writer:
            first_writer.append(me)
        if me == first_writer[0]:
            if seen[me] == 2:  # entered (a copy) and filtered ("ignore" in front)
                b_entered.wait(timeout=20)  # A inside its scope until B is inside its own
            elif seen[me] == 3:  # left: the saved filters back
                a_left.set()
        elif seen[me] == 2:  # B entered, saving A's filters, and filtered
            b_entered.set()
            a_left.wait(timeout=20)  # B inside its scope until A has left its own

    results, errors = [], []

    def fit():
        try:
            start.wait(timeout=20)
            est = _FITS["ktuple"](X)
            results.append(est.cluster_centers_)
        except Exception as error:  # noqa: BLE001 - reported by the assertion below
            errors.append(error)

    before = list(warnings.filters)
    with _watched_filters(on_write):
        threads = [threading.Thread(target=fit) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    assert errors == [] and len(results) == 2
    np.testing.assert_array_equal(results[0], results[1])
    assert warnings.filters == before
    with warnings.catch_warnings(record=True) as shown:
        warn_user("a fit's honest report after two threaded fits", PrivacyLeakWarning)
    assert [w.category for w in shown] == [PrivacyLeakWarning]


def test_collected_warnings_are_per_context_and_reach_the_ordered_map_workers():
    """The collector is a context variable: a scope in one thread neither collects nor drops
    the warnings of another, and the workers of ``ordered_map`` run in the caller's context."""
    from skdpcluster.utils._warnings import collected_warnings
    other_thread = []

    def warn_elsewhere():
        with warnings.catch_warnings(record=True) as shown:
            warnings.simplefilter("always")
            warn_user("from another thread", UtilityWarning)
        other_thread.extend(str(w.message) for w in shown)

    with collected_warnings() as caught:
        warn_user("collected", UtilityWarning)
        thread = threading.Thread(target=warn_elsewhere)
        thread.start()
        thread.join()
        ordered_map(lambda item: warn_user(f"worker {item}", UserWarning), range(2), 2)
        with collected_warnings(ignore=True) as dropped:
            warn_user("dropped", PrivacyLeakWarning)
    assert dropped is None and other_thread == ["from another thread"]
    assert sorted(caught) == sorted([("collected", UtilityWarning), ("worker 0", UserWarning),
                                     ("worker 1", UserWarning)])


def test_equal_coreset_points_are_merged_before_the_restarts():
    """More than k coreset points but at most k distinct ones: the distinct points are the
    centres (the optimum, cost 0) and filler centres the rest; scikit-learn's KMeans on the
    duplicates warned "Number of distinct clusters found smaller than n_clusters", which
    was silenced with a catch_warnings. More than k distinct points: KMeans on the merged
    points, their weights added, with no warning and no write to the filters."""
    from skdpcluster.cluster._stable_init import GridInitializer, filler_centers
    rng = np.random.default_rng(0)
    distinct = rng.normal(size=(3, 2))
    points = distinct[[0, 1, 0, 2, 1, 0]]
    with warnings.catch_warnings(record=True) as shown, _watched_filters() as writes:
        warnings.simplefilter("always")
        centers = GridInitializer()._cluster_coreset(points, np.ones(6), 4, 10.0,
                                                     np.random.default_rng(5))
        more = np.vstack([distinct, 5.0 + rng.normal(size=(3, 2))])
        spread = GridInitializer()._cluster_coreset(more[[0, 1, 2, 3, 4, 5, 0, 3]],
                                                    np.ones(8), 4, 10.0,
                                                    np.random.default_rng(5))
    assert _ours(writes) == [] and [str(w.message) for w in shown] == []
    fillers = filler_centers(1, np.eye(2), 1e-3 * 10.0, np.random.default_rng(5))
    np.testing.assert_array_equal(centers, np.vstack([distinct, fillers]))
    assert spread.shape == (4, 2) and np.isfinite(spread).all()
