"""PrivateInteriorPoint: a private point between the data's minimum and maximum (Cohen et al. 2021,
Proposition 2.9; ``spec/cohen_ktuple.md`` §7.2)."""


import numpy as np

from skdpcluster.averaging._common import _check_finite_array, _check_generator, _check_grid
from skdpcluster.mechanisms import (
    PrivacyEvent,
    exponential_mechanism,
)
from skdpcluster.utils._validation import check_epsilon_delta

# ---------------------------------------------------------------------------
# Interior point (spec §7.2)
# ---------------------------------------------------------------------------


def _quality_runs(values, data_radius, r_min, n_intervals):
    """Maximal runs of grid indices on which q(i) = min(L(i), U(i)) is constant.

    Returns the first index of each run, its length and its quality. L changes
    only at some lo(x), U only just after some hi(x), so these are the run
    starts; L and U there come from binary searches on the sorted roundings.
    """
    scaled = (np.clip(values, -data_radius, data_radius) + data_radius) / r_min
    lower = np.sort(np.clip(np.floor(scaled), 0, n_intervals).astype(np.int64))
    upper = np.sort(np.clip(np.ceil(scaled), 0, n_intervals).astype(np.int64))
    after_upper = upper[upper < n_intervals] + 1
    starts = np.unique(np.concatenate(([0], lower, after_upper)))
    lengths = np.diff(np.append(starts, n_intervals + 1))
    at_or_below = np.searchsorted(lower, starts, side="right")  # L(start)
    at_or_above = upper.size - np.searchsorted(upper, starts, side="left")  # U(start)
    return starts, lengths, np.minimum(at_or_below, at_or_above)


def _interior_point(values, data_radius, r_min, n_intervals, epsilon, rng):
    """Kernel of :func:`private_interior_point`; trusts its input."""
    starts, lengths, quality = _quality_runs(values, data_radius, r_min, n_intervals)
    # Choosing a run with weight len * exp(eps q / 2), then a point uniformly inside it, is
    # exactly the exponential mechanism over the N + 1 grid points; the caller prices it.
    run, _ = exponential_mechanism(
        quality, epsilon=epsilon, sensitivity=1.0, rng=rng, log_base_measure=np.log(lengths),
        neighbouring="add_remove",
    )
    index = starts[run] + rng.integers(lengths[run])
    return -data_radius + float(index) * r_min


def private_interior_point(values, *, data_radius, r_min, epsilon, rng):
    r"""Private interior point on the grid of step ``r_min`` (Cohen et al. 2021, App. A.1.2).

    Implements ``spec/cohen_ktuple.md`` §7.2. Values are clipped to
    :math:`[-\Lambda, \Lambda]` and rounded down and up to the grid
    :math:`z(i) = -\Lambda + i\,r_{\min}`, :math:`i = 0..N`,
    :math:`N = \lceil 2\Lambda / r_{\min}\rceil`. With
    :math:`L(i) = \#\{x : \mathrm{lo}(x) \le i\}` and
    :math:`U(i) = \#\{x : \mathrm{hi}(x) \ge i\}`, the exponential mechanism
    outputs :math:`z(i)` with probability proportional to

    .. math::

        \exp\left(\frac{\varepsilon}{2}\, q(i)\right), \qquad q(i) = \min(L(i), U(i)).

    It samples exactly in :math:`O(n \log n)`: :math:`q` is constant on at most
    :math:`2n + 1` runs of the grid, a run :math:`j` is chosen with log weight
    :math:`\log(\mathrm{len}_j) + \varepsilon q_j / 2` (Gumbel-max in log
    space, so :math:`\varepsilon q / 2 \approx 10^7` cannot overflow), then a
    point uniformly inside it.

    **Privacy.** Adding, removing or replacing one value moves every
    :math:`L(i)` and :math:`U(i)` by at most 1, so :math:`q` has sensitivity
    1 and the mechanism is :math:`\varepsilon`-DP under add/remove and under
    replace-one (McSherry & Talwar 2007). Under add/remove the bound is
    :math:`\varepsilon/2`: adding a value raises every :math:`L(i)` and
    :math:`U(i)` by 0 or 1, so :math:`q` moves one way only, and the weight
    of every grid point and the normaliser change by factors in
    :math:`[1, e^{\varepsilon/2}]`, whose ratio is within
    :math:`e^{\pm\varepsilon/2}` (the monotone case of McSherry & Talwar
    2007). The event records :math:`\varepsilon`, valid under both
    relations; ``test_interior_point_empirical_privacy_loss`` checks
    :math:`\varepsilon` on a replace-one pair and :math:`\varepsilon/2` on an
    add/remove pair, each with a halved-sensitivity mutant that must fail.
    An empty input has :math:`q = 0` everywhere and gives a uniform grid
    point; no data-dependent exception is raised.

    **Utility.** If :math:`n \ge (4/\varepsilon)\log(|G|/\beta)`, then with
    probability :math:`1 - \beta` the output lies in
    :math:`[\min S - r_{\min}, \max S + r_{\min}]`.

    Parameters
    ----------
    values : array-like of shape (n_values,)
        Finite values; may be empty.
    data_radius : float
        The public bound :math:`\Lambda`, in :math:`(0, 10^{100}]` (rescale the
        values for a larger one).
    r_min : float
        Grid step, > 0, with ``2 * data_radius / r_min <= 2**52``.
    epsilon : float
        Privacy parameter, > 0.
    rng : numpy.random.Generator

    Returns
    -------
    z : float
        A grid point.
    event : PrivacyEvent
        ``"private_interior_point"``, ``(epsilon, 0)``.

    Raises
    ------
    ValueError
        On invalid parameters, before any randomness is drawn.
    """
    values = _check_finite_array(values, "values", 1)
    data_radius, r_min, n_intervals = _check_grid(data_radius, r_min)
    epsilon, _ = check_epsilon_delta(epsilon, 0.0)
    rng = _check_generator(rng)
    z = _interior_point(values, data_radius, r_min, n_intervals, epsilon, rng)
    event = PrivacyEvent(
        "private_interior_point", epsilon, 0.0, sensitivity=1.0, scale=2.0 / epsilon,
        neighbouring="add_remove",
        details={"grid_size": n_intervals + 1, "grid_step": r_min,
                 "also_private_under": "replace_one"},
    )
    return z, event
