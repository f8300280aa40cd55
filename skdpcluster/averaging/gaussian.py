"""A CoinPress-style private learner of one Gaussian under zCDP (Biswas, Dong, Kamath & Ullman,
NeurIPS 2020; ``spec/cohen_ktuple.md`` §9.6)."""

import math

import numpy as np

from skdpcluster.averaging._common import (
    _check_center,
    _check_generator,
    _check_points,
    _check_positive_int,
    _check_real,
    _project_onto_ball,
    _split_evenly,
    project_into_ball,
)
from skdpcluster.mechanisms import (
    PrivacyEvent,
    zcdp_gaussian_mechanism,
)
from skdpcluster.utils._data import as_rows

# Confidence of each CoinPress step; it sets the clipping radii and the
# shrinking of the confidence sets, so it affects utility only, never privacy.
_COINPRESS_BETA = 0.01

# Weights tried when combining two lower bounds on the whitened covariance.
_LOWER_BOUND_WEIGHTS = np.linspace(0.0, 1.0, 101)

# ---------------------------------------------------------------------------
# Single Gaussian, CoinPress-style (cohen_ktuple.md §9.6)
# ---------------------------------------------------------------------------


def _chi_radius(n_dim, log_inverse_probability):
    r"""Radius exceeded by :math:`\|N(0, I_d)\|` with probability at most :math:`e^{-x}`.

    Laurent & Massart (2000), Lemma 1:
    :math:`\Pr[\chi^2_d \ge d + 2\sqrt{dx} + 2x] \le e^{-x}`.
    """
    x = log_inverse_probability
    return math.sqrt(n_dim + 2.0 * math.sqrt(n_dim * x) + 2.0 * x)


def _clip_rows(vectors, radius):
    """Rows projected onto the ball B(0, radius), each of exact norm at most ``radius``.

    The sums of the rows and of their outer products have sensitivity
    ``radius`` and ``radius**2`` only with the exact bound
    (:func:`~skdpcluster.averaging._common.project_into_ball`).
    """
    rows = np.array(vectors, dtype=np.float64)
    project_into_ball(rows, radius)
    return rows


def _scaled_offset_sum(chunk, center, scale, centre, clip_radius):
    """``sum(clip((x - center) / scale - centre, clip_radius))`` over a chunk of rows."""
    return _clip_rows((chunk.X - center) / scale - centre, clip_radius).sum(axis=0)


def _coinpress_mean(rows, center, scale, n_public, radius, rho_steps, rng):
    r"""CoinPress mean steps (MVM, iterated as MVMRec; Biswas et al. 2020), add/remove version.

    In the coordinates :math:`y = (x - c)/s` of the ``rows`` (``center`` c,
    ``scale`` s) the data has covariance at most the identity and mean in
    :math:`B(0, r)`. Each step clips to :math:`B(c_t, r_t + \gamma_1)`,
    releases :math:`\sum (\mathrm{clip}(y) - c_t)/n` with sensitivity
    :math:`(r_t + \gamma_1)/n` and moves :math:`c_t` by it, then shrinks the
    ball to :math:`r_{t+1} = \gamma_2\sqrt{1/n + s_t^2}`, :math:`s_t` the
    noise sd. Radii depend only on public values. Each step is one pass over
    ``rows``.

    The noise goes on the mean offset, and :math:`c_t` is added after
    (post-processing): added to :math:`c_t + \sum/n` it would be rounded at
    the ulp of :math:`c_t`, which one row can move by a whole ulp, far above the
    sensitivity when the mean is far from the public centre in units of
    :math:`\sigma_{\max}` (review R5-3: 243 sensitivities at n = 10^5, mean
    10^14, eight steps).
    """
    n_dim = rows.shape[1]
    clip_margin = _chi_radius(n_dim, math.log(n_public / _COINPRESS_BETA))
    shrink = _chi_radius(n_dim, math.log(1.0 / _COINPRESS_BETA))
    centre = np.zeros(n_dim)
    for rho_step in rho_steps:
        clip_radius = radius + clip_margin
        total = rows.map_reduce(_scaled_offset_sum, center, scale, centre, clip_radius)
        sensitivity = clip_radius / n_public
        offset, _ = zcdp_gaussian_mechanism(
            total / n_public, sensitivity=sensitivity, rho=rho_step, rng=rng,
            neighbouring="add_remove",
        )
        centre = centre + offset
        noise_sd = sensitivity / math.sqrt(2.0 * rho_step)
        radius = shrink * math.sqrt(1.0 / n_public + noise_sd**2)
    return centre


def _symmetric_from_upper(upper_values, n_dim):
    matrix = np.zeros((n_dim, n_dim))
    matrix[np.triu_indices(n_dim)] = upper_values
    return matrix + np.triu(matrix, 1).T


def _refine_whitening(estimate, transform, ratio, noise_norm, sampling):
    r"""CoinPress covariance update: a new whitening with a smaller condition bound.

    Invariant (with high probability): :math:`I \preceq K \preceq u I` for
    :math:`K = T\Sigma T^\top`. If :math:`\|E\| \le \psi` and the sampling
    error is multiplicative, :math:`(1-\delta)^2 K - \psi I \preceq Z \preceq
    (1+\delta)^2 K + \psi I`, then :math:`K \preceq U = (Z + \psi I)/(1-\delta)^2`
    (eigenvalues raised to at least 1) and both :math:`(Z - \psi I)/(1+\delta)^2`
    and :math:`I` are below :math:`K`. With :math:`T' = U^{-1/2} T`, every
    convex combination of the two lower bounds bounds :math:`T'\Sigma T'^\top`
    from below by :math:`l I`; rescaling by :math:`1/\sqrt{l}` restores the
    invariant with :math:`u' = 1/l`. The update is kept only if
    :math:`u' < u`. Post-processing only: it affects utility, not privacy.
    """
    if sampling >= 1.0:
        return transform, ratio
    eigenvalues, eigenvectors = np.linalg.eigh(estimate)
    upper = np.maximum((eigenvalues + noise_norm) / (1.0 - sampling) ** 2, 1.0)
    from_estimate = (eigenvalues - noise_norm) / ((1.0 + sampling) ** 2 * upper)
    from_invariant = 1.0 / upper
    weights = _LOWER_BOUND_WEIGHTS[:, None]
    lower = np.max(np.min(weights * from_estimate + (1.0 - weights) * from_invariant, axis=1))
    if not 1.0 / lower < ratio:
        return transform, ratio
    inverse_sqrt = (eigenvectors / np.sqrt(upper * lower)) @ eigenvectors.T
    return inverse_sqrt @ transform, 1.0 / lower


#: Largest ``sigma_max / sigma_min`` of :func:`private_gaussian_estimate`: the covariance
#: steps' sensitivity grows as its square (review R10: 1e80 / 1e-80 overflowed after the mean
#: stage had drawn its noise).
_MAX_SIGMA_RATIO = 1e100


#: Largest bound on a noise scale of :func:`private_gaussian_estimate` (see
#: :func:`_check_noise_scales`): its square, at most 1e304, leaves room below the float64
#: maximum for the draws and the sums of the releases.
_MAX_NOISE_SCALE = 1e152


def _step_shares(rho, n_iter_mean, n_iter_cov):
    """The zCDP share of every step of :func:`private_gaussian_estimate`: ``rho / 2`` per stage."""
    return ([_split_evenly(rho / 2.0, n_iter_mean)] * n_iter_mean,
            [_split_evenly(rho / 2.0, n_iter_cov)] * n_iter_cov)


def _largest_noise_scale(n_dim, n_public, radius, sigma_min, sigma_max, rho_mean, rho_cov):
    r"""A bound, from public values alone, on every noise scale of the learner and ``sigma_max``.

    A mean step's scale is
    :math:`s_t = (r_t + \gamma_1)/(n\sqrt{2\rho_t})`, with
    :math:`r_0 = R/\sigma_{\max}` and
    :math:`r_{t+1} = \gamma_2\sqrt{1/n + s_t^2} \le \gamma_2(1 + s_t)`
    (:math:`n \ge 1`). A covariance step's scale is at most
    :math:`u_0\gamma_1^2/(n\sqrt{2\rho_t})` (:math:`u` never grows from
    :math:`u_0 = (\sigma_{\max}/\sigma_{\min})^2`), and about
    :math:`\sigma_{\max}^2\gamma_1^2/(n\sqrt{2\rho_t})` in the data's
    units: variances, whose square roots are compared. Every share must be
    positive. A value that overflows becomes ``inf`` (no ``**``, which raises).
    """
    clip_margin = _chi_radius(n_dim, math.log(n_public / _COINPRESS_BETA))
    shrink = _chi_radius(n_dim, math.log(1.0 / _COINPRESS_BETA))
    bound, largest = radius / sigma_max, sigma_max
    for rho_step in rho_mean:
        bound = (bound + clip_margin) / (n_public * math.sqrt(2.0 * rho_step))
        largest = max(largest, bound)
        bound = shrink * (1.0 + bound)
    for rho_step in rho_cov:  # the covariance's noise is a variance: compare its square root
        root = math.sqrt(clip_margin * clip_margin / (n_public * math.sqrt(2.0 * rho_step)))
        largest = max(largest, root * max(sigma_max / sigma_min, sigma_max))
    return largest


def _learner_accepts(n_dim, n_public, radius, sigma_min, sigma_max, rho, n_iter_mean, n_iter_cov):
    """Whether :func:`_check_noise_scales` accepts these values (no exception: a caller's test).

    For valid arguments of :func:`private_gaussian_estimate` (``n_public >= 1``,
    positive bounds, ``sigma_max / sigma_min <= 1e100``): True exactly when the
    learner does not refuse them in its pre-draw check.
    """
    rho_mean, rho_cov = _step_shares(rho, n_iter_mean, n_iter_cov)
    return (rho_mean[0] > 0 and rho_cov[0] > 0 and _largest_noise_scale(
        n_dim, n_public, radius, sigma_min, sigma_max, rho_mean, rho_cov) <= _MAX_NOISE_SCALE)


def _check_noise_scales(n_dim, n_public, radius, sigma_min, sigma_max, rho, rho_mean, rho_cov):
    r"""Refuse, before any randomness, public values at which a noise scale could overflow.

    Bounds the noise scales of :func:`_coinpress_mean` and
    :func:`_coinpress_covariance` from public values alone
    (:func:`_largest_noise_scale`; review R5-4: at ``rho=1e-300`` the square
    of a mean step's noise scale overflowed once its noise was drawn). Each
    of them, and :math:`\sigma_{\max}` (the covariance is clipped to
    :math:`\sigma_{\max}^2`), must be at most ``_MAX_NOISE_SCALE``: their
    squares, and the mean release scaled by :math:`\sigma_{\max}`, stay
    below about 1e304. :func:`_learner_accepts` is the same test without the
    exception, for callers whose bounds are released inside a private step.
    """
    if not (rho_mean[0] > 0 and rho_cov[0] > 0):
        raise ValueError(f"rho={rho!r} is too small: its share of a step rounds to 0.")
    largest = _largest_noise_scale(n_dim, n_public, radius, sigma_min, sigma_max, rho_mean,
                                   rho_cov)
    if not largest <= _MAX_NOISE_SCALE:
        raise ValueError(
            f"rho={rho!r} is too small for the public bounds n_public={n_public!r}, "
            f"radius={radius!r}, sigma_min={sigma_min!r}, sigma_max={sigma_max!r}: a noise "
            f"scale of the Gaussian learner (or sigma_max) could reach {largest:.3g}, above "
            f"{_MAX_NOISE_SCALE:g}, and its square overflow once the noise is drawn; use a "
            "larger rho or n_public, or a smaller radius, sigma_max or sigma_max / sigma_min."
        )


def _whitened_second_moment(chunk, mean, transform, clip_norm, reach):
    r"""``sum(w w^T)`` over a chunk, ``w`` = ``(x - mean)`` whitened by ``transform`` and clipped.

    ``x - mean`` is first projected into :math:`B(0, \rho)`, ``reach``
    :math:`\rho` = ``clip_norm`` :math:`/\sigma_{\min}(T)`: a row beyond it
    whitens beyond ``clip_norm`` along the same direction (:math:`T` is
    linear), so its clipped :math:`w` is unchanged in exact arithmetic, and
    no row reaches the product overflowed. Whitening first let an
    overflowed :math:`x - \mu` become NaN in the product (a NaN release),
    and a huge finite row overflow there with signs that depended on its
    block (review R9). The projection runs at the scale :math:`2^{-e}` that
    puts :math:`\rho` in :math:`[1/2, 1)` (exact scalings by powers of two):
    :func:`~skdpcluster.averaging._common.project_into_ball` proves rows inside
    only for radii in :math:`[2^{-500}, 2^{500}]` and projects every other row
    onto the sphere (review R10: with :math:`\rho` out of that range every
    :math:`w` had norm ``clip_norm``).
    """
    scale = 2.0 ** -math.frexp(reach)[1]
    offsets = chunk.X - mean
    offsets *= scale
    project_into_ball(offsets, reach * scale)
    whitened = offsets @ transform.T
    whitened /= scale
    clipped = _clip_rows(whitened, clip_norm)
    return clipped.T @ clipped


def _coinpress_covariance(rows, mean, n_public, sigma_min, sigma_max, rho_steps, rng):
    r"""CoinPress covariance steps (MVC, iterated as MVCRec; Biswas et al. 2020), add/remove.

    Each step whitens with :math:`T`, clips to norm :math:`\sqrt{u}\gamma`,
    releases the upper triangle of :math:`\sum w w^\top / n` with L2
    sensitivity :math:`u\gamma^2/n` (one added point adds :math:`ww^\top/n`,
    whose upper triangle has norm at most :math:`\|w\|^2/n`), and refines
    :math:`T`. The symmetric noise has spectral norm at most
    :math:`2 s(\sqrt d + \sqrt{\log(2/\beta)})` with probability
    :math:`1-\beta` (Sudakov-Fernique comparison with :math:`2s\langle g, v\rangle`
    and Gaussian concentration). Returns the last estimate in the original
    coordinates, :math:`T^{-1} Z T^{-\top}`. The rows are centred at the private
    ``mean``; each step is one pass over ``rows``.
    """
    n_dim = rows.shape[1]
    clip_norm = _chi_radius(n_dim, math.log(n_public / _COINPRESS_BETA))
    log_two_over_beta = math.log(2.0 / _COINPRESS_BETA)
    sampling = math.sqrt(n_dim / n_public) + math.sqrt(2.0 * log_two_over_beta / n_public)
    spectral_factor = 2.0 * (math.sqrt(n_dim) + math.sqrt(log_two_over_beta))
    transform, ratio = np.eye(n_dim) / sigma_min, (sigma_max / sigma_min) ** 2
    for rho_step in rho_steps:
        step_clip = math.sqrt(ratio) * clip_norm
        reach = step_clip / float(np.linalg.svd(transform, compute_uv=False)[-1])
        moment = rows.map_reduce(_whitened_second_moment, mean, transform, step_clip, reach)
        sensitivity = ratio * clip_norm**2 / n_public
        noisy_upper, _ = zcdp_gaussian_mechanism(
            (moment / n_public)[np.triu_indices(n_dim)], sensitivity=sensitivity,
            rho=rho_step, rng=rng, neighbouring="add_remove",
        )
        estimate, used_transform = _symmetric_from_upper(noisy_upper, n_dim), transform
        noise_norm = spectral_factor * sensitivity / math.sqrt(2.0 * rho_step)
        transform, ratio = _refine_whitening(estimate, transform, ratio, noise_norm, sampling)
    unwhiten = np.linalg.inv(used_transform)
    return unwhiten @ estimate @ unwhiten.T


def _rows_and_center(points, center):
    """``points`` as rows of :mod:`skdpcluster.utils._data` (an array is validated first)."""
    if hasattr(points, "map_reduce"):
        return points, _check_center(center, points.shape[1])
    points, center = _check_points(points, center)
    return as_rows(points), center


def _project_spectrum(matrix, low, high):
    """Symmetrise and clip the eigenvalues into [low, high]."""
    eigenvalues, eigenvectors = np.linalg.eigh((matrix + matrix.T) / 2.0)
    projected = (eigenvectors * np.clip(eigenvalues, low, high)) @ eigenvectors.T
    return (projected + projected.T) / 2.0


def private_gaussian_estimate(
    points,
    *,
    n_public,
    center,
    radius,
    sigma_min,
    sigma_max,
    rho,
    rng,
    n_iter_mean=3,
    n_iter_cov=3,
):
    r"""Private mean and covariance of one Gaussian, CoinPress-style (Biswas et al. 2020).

    The single-Gaussian learner G of ``spec/cohen_ktuple.md`` §9.6, private
    under add/remove of one point with a public or already noisy count
    (§11, item 34), for data from :math:`N(\mu, \Sigma)` with public bounds
    :math:`\|\mu - c\| \le R` and :math:`\sigma_{\min}^2 I \preceq \Sigma
    \preceq \sigma_{\max}^2 I` (§9.1). Two stages, each :math:`\rho/2`, split
    evenly over its steps:

    1. **Mean** (``n_iter_mean`` steps of CoinPress' MVM): in the coordinates
       :math:`y = (x - c)/\sigma_{\max}`, clip to the current ball widened by
       :math:`\gamma_1 = \sqrt{d + 2\sqrt{d\log(n/\beta)} + 2\log(n/\beta)}`,
       release the centred clipped sum divided by ``n_public`` plus Gaussian
       noise, and shrink the ball. The result is projected onto
       :math:`B(c, R)`.
    2. **Covariance** (``n_iter_cov`` steps of CoinPress' MVC) of
       :math:`x - \hat\mu`: whiten with the current :math:`T`
       (:math:`T_0 = I/\sigma_{\min}`, condition bound
       :math:`u_0 = \sigma_{\max}^2/\sigma_{\min}^2`), clip to norm
       :math:`\sqrt{u}\gamma_1`, release the upper triangle of the second
       moment divided by ``n_public`` with noise, and tighten :math:`T` and
       :math:`u`. Pairing differences, as in the paper, would not survive the
       removal of one point, hence the centring at the private mean.

    The released covariance is symmetrised and its eigenvalues are clipped
    to :math:`[\sigma_{\min}^2, \sigma_{\max}^2]`, so it is always symmetric
    positive definite, even when noise dominates (tiny ``n_public`` or
    ``rho``). Each step's confidence is :math:`\beta = 0.01`; it sets radii
    only.

    **Privacy.** Every release is a Gaussian mechanism whose sensitivity is a
    function of public values and of earlier releases (clipping radii
    :math:`(r_t + \gamma_1)/n` and :math:`u\gamma^2/n` under add/remove), with
    :math:`\sigma = \Delta/\sqrt{2\rho_t}`, so it is :math:`\rho_t`-zCDP (Bun
    & Steinke 2016, Proposition 1.6) and the whole call is
    :math:`\sum_t \rho_t \le \rho`-zCDP by adaptive composition; the
    projections are post-processing. Under replace-one it is
    :math:`4\rho`-zCDP (group privacy of size 2, Bun & Steinke 2016,
    Proposition 1.9). Convert with :func:`~skdpcluster.mechanisms.zcdp_to_dp`.

    Parameters
    ----------
    points : array-like of shape (n_points, n_features), or rows of :mod:`skdpcluster.utils._data`
        A rows object (Dask input, already validated) is read in one
        map-reduce of per-chunk sums per step.
    n_public : float
        Public or noisy count, >= 1; every sum is divided by it.
    center : array-like of shape (n_features,)
        Public centre :math:`c` of the ball containing the mean.
    radius : float
        Public radius :math:`R > 0` of that ball.
    sigma_min, sigma_max : float
        Public bounds on the standard deviations,
        ``0 < sigma_min <= sigma_max <= 1e152``, ``sigma_max / sigma_min <= 1e100``.
    rho : float
        Total zCDP budget, > 0. Public values at which a noise scale could
        exceed 1e152 (its square would overflow: a tiny ``rho`` with a small
        ``n_public``, a huge ``radius / sigma_max`` or ``sigma_max / sigma_min``)
        are refused with a ``ValueError``, before any randomness.
    rng : numpy.random.Generator
    n_iter_mean, n_iter_cov : int, default=3
        Number of steps of each stage.

    Returns
    -------
    mean : ndarray of shape (n_features,)
    covariance : ndarray of shape (n_features, n_features)
        Symmetric, eigenvalues in ``[sigma_min**2, sigma_max**2]``.
    event : PrivacyEvent
        ``"private_gaussian_estimate"`` with ``rho`` the total spent and
        ``epsilon = delta = 0``.
    """
    rows, center = _rows_and_center(points, center)
    n_public = _check_real(n_public, "n_public", low=1.0, low_inclusive=True)
    radius = _check_real(radius, "radius")
    sigma_min = _check_real(sigma_min, "sigma_min")
    sigma_max = _check_real(sigma_max, "sigma_max", low=sigma_min, low_inclusive=True)
    if not sigma_max / sigma_min <= _MAX_SIGMA_RATIO:
        raise ValueError(
            f"sigma_max / sigma_min must be at most {_MAX_SIGMA_RATIO:.0e}, got sigma_min="
            f"{sigma_min!r} and sigma_max={sigma_max!r}: the covariance steps' sensitivity "
            "(sigma_max / sigma_min)**2 would overflow; narrow the public bounds.")
    rho = _check_real(rho, "rho")
    n_iter_mean = _check_positive_int(n_iter_mean, "n_iter_mean")
    n_iter_cov = _check_positive_int(n_iter_cov, "n_iter_cov")
    rng = _check_generator(rng)
    rho_mean, rho_cov = _step_shares(rho, n_iter_mean, n_iter_cov)
    _check_noise_scales(rows.shape[1], n_public, radius, sigma_min, sigma_max, rho, rho_mean,
                        rho_cov)
    scaled_mean = _coinpress_mean(rows, center, sigma_max, n_public, radius / sigma_max,
                                  rho_mean, rng)
    mean = _project_onto_ball(center + sigma_max * scaled_mean, center, radius)
    covariance = _coinpress_covariance(rows, mean, n_public, sigma_min, sigma_max, rho_cov, rng)
    event = PrivacyEvent(
        "private_gaussian_estimate", 0.0, 0.0, rho=math.fsum(rho_mean + rho_cov),
        neighbouring="add_remove",
        details={"composition": "zcdp", "rho_mean_per_step": rho_mean[0],
                 "rho_cov_per_step": rho_cov[0], "n_iter_mean": n_iter_mean,
                 "n_iter_cov": n_iter_cov, "n_public": n_public, "beta_per_step": _COINPRESS_BETA},
    )
    return mean, _project_spectrum(covariance, sigma_min**2, sigma_max**2), event
