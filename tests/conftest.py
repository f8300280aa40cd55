import os
import sys

import pytest

# Make the statistical helpers in this folder importable as plain modules.
sys.path.insert(0, os.path.dirname(__file__))


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "private_step_failure: the test provokes the safety net of a fit's private step on purpose",
    )


@pytest.fixture(autouse=True)
def _no_silent_private_step_failure(request, monkeypatch):
    """Fail any test in which a fit's private step raised, even under ignored warnings.

    The safety net turns such a raise into a charged failure with a
    ``PrivateStepFailedWarning``, which ``setup.cfg`` makes an error; but
    scikit-learn's common checks run under ``ignore_warnings``, where a defect
    would pass unseen. This records every use of the net instead.
    """
    from skdpcluster.cluster._base import _PrivateFitMixin

    uses = []
    original = _PrivateFitMixin._failed_private_step

    def recording(self, plan):
        uses.append(type(self).__name__)
        return original(self, plan)

    monkeypatch.setattr(_PrivateFitMixin, "_failed_private_step", recording)
    yield
    if uses and request.node.get_closest_marker("private_step_failure") is None:
        pytest.fail(f"the private step of {sorted(set(uses))} raised and was caught by the safety "
                    "net: a defect (mark the test private_step_failure if it is on purpose)")
