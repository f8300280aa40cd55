r"""Private primitives on arrays: interior point, averages, counts, 1-median, Gaussian.

These are the building blocks of the k-tuple framework (``PrivatekAverages``),
of the stable k-means / k-median estimators and of the Gaussian mixture. Every
function is pure: validated arrays, privacy parameters and a
:class:`numpy.random.Generator` go in; ``(result, event)`` comes out, where
``event`` is **one** composite :class:`~skdpcluster.mechanisms.PrivacyEvent`
stating the total privacy the call is proven to spend. Its ``details`` hold
only public internals (budget split, composition, grid size); nothing in an
event depends on the data. Every noise draw goes through
:mod:`skdpcluster.mechanisms`.

One module per primitive (``interior_point``, ``bounding_segment``,
``average_1d``, ``average``, ``count``, ``one_median``, ``gaussian``; shared
checks in ``_common``); import the functions from here. Contents, with the
specification each function implements:

* :func:`private_interior_point`, :func:`private_bounding_segment`,
  :func:`private_average_1d`, :func:`private_average`: the private average of
  Proposition 2.9 of Cohen, Kaplan, Mansour, Stemmer & Tsfadia (ICML 2021),
  reconstructed in ``spec/cohen_ktuple.md`` §7.2-§7.5, with the correction of
  ``spec/cohen_ktuple_review.md`` (Finding 6): the centred clipped **sum** is
  divided by a public count ``n_public``, which makes the average private
  under add/remove of one point with sensitivity :math:`(b-a)/(2 n)`.
* :func:`private_count`: the noisy count of ``spec/cohen_ktuple.md`` §7.6.
* :func:`private_one_median`: the private 1-median by noisy projected gradient
  descent of ``spec/shechner_stable.md`` §9.7 (the thesis' tool, Bassily, Smith
  & Thakurta 2014, in §4.1 there); :func:`private_one_medians` runs it on
  disjoint cells at once.
* :func:`private_gaussian_estimate`: a CoinPress-style learner (Biswas, Dong,
  Kamath & Ullman, NeurIPS 2020) of one Gaussian under zCDP,
  ``spec/cohen_ktuple.md`` §9.6.

Data-dependent exceptions would leak, so none is raised after validation: an
empty input gives a data-independent random output. Non-finite values are
refused up front as a documented domain restriction; the estimators validate
their input before calling these functions.
"""

# Private helpers other modules of the package import from here, and the seams the tests patch.
from skdpcluster.averaging._common import (  # noqa: F401
    _check_generator,
    _check_points,
    _project_onto_ball,
)
from skdpcluster.averaging.average import private_average
from skdpcluster.averaging.average_1d import (  # noqa: F401
    _SUM_SENSITIVITY_PER_WIDTH,
    _noisy_clipped_average,
    private_average_1d,
)
from skdpcluster.averaging.bounding_segment import private_bounding_segment
from skdpcluster.averaging.count import private_count
from skdpcluster.averaging.gaussian import private_gaussian_estimate
from skdpcluster.averaging.interior_point import _quality_runs, private_interior_point  # noqa: F401
from skdpcluster.averaging.one_median import (  # noqa: F401
    _MEDIAN_SENSITIVITIES,
    private_one_median,
    private_one_medians,
    private_one_medians_of_rows,
)

__all__ = [
    "private_average",
    "private_average_1d",
    "private_bounding_segment",
    "private_count",
    "private_gaussian_estimate",
    "private_interior_point",
    "private_one_median",
    "private_one_medians",
]
