"""The DP checks of skdpcluster.utils.estimator_checks must catch the mutants they exist for."""

from dataclasses import replace

import numpy as np
import pytest

from skdpcluster import PrivateStableKMeans
from skdpcluster.mechanisms import zcdp_to_dp
from skdpcluster.utils.estimator_checks import check_dp_ledger_within_budget


class _UnchargedZCDP(PrivateStableKMeans):
    """Mutant: the zCDP releases are made, but their composite event is dropped (review RA-9)."""

    def _fit_private(self, X, plan, rng):
        result = super()._fit_private(X, plan, rng)
        result.events = [event for event in result.events if event.mechanism != "zcdp_composition"]
        return result


class _UnderConvertedZCDP(PrivateStableKMeans):
    """Mutant: the composite keeps its rho but converts a quarter of it to epsilon."""

    def _fit_private(self, X, plan, rng):
        result = super()._fit_private(X, plan, rng)
        result.events = [
            replace(event, epsilon=zcdp_to_dp(event.rho / 4, event.delta))
            if event.mechanism == "zcdp_composition" else event for event in result.events]
        return result


@pytest.fixture(scope="module")
def three_blobs():
    rng = np.random.default_rng(0)
    return np.concatenate([rng.normal(c, 0.3, size=(1000, 2)) for c in ([-4, 0], [4, 0], [0, 6])])


@pytest.mark.parametrize("estimator_class, caught", [
    (PrivateStableKMeans, None),
    (_UnchargedZCDP, "zCDP releases of rho"),
    (_UnderConvertedZCDP, "converted to epsilon"),
], ids=["honest", "mutant_uncharged_zcdp", "mutant_under_converted_zcdp"])
def test_ledger_check_sees_uncharged_zcdp_releases(three_blobs, estimator_class, caught):
    """Regression (review RA-9): summing (epsilon, delta) let the uncharged mutant pass (spent 0 for rho 0.014)."""
    estimator = estimator_class(n_clusters=3)  # the private data bound charges epsilon 0.1 besides
    if caught is None:
        check_dp_ledger_within_budget(estimator, three_blobs)
    else:
        with pytest.raises(AssertionError, match=caught):
            check_dp_ledger_within_budget(estimator, three_blobs)
