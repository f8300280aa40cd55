"""Tests of the in-fit thread helpers (skdpcluster.utils._threads)."""

import threading

import pytest

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


def test_fit_threads_follows_the_openmp_limits():
    assert fit_threads() >= 1
    with single_threaded():
        assert fit_threads() == 1
