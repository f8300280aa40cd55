"""Synthetic data: the separated Gaussian mixtures of the k-tuple papers."""

import math
from numbers import Integral, Real

import numpy as np

from skdpcluster.utils import check_random_state

__all__ = ["make_separated_mixture"]


def make_separated_mixture(
    n_samples=1000,
    n_clusters=2,
    n_features=1,
    *,
    separation=None,
    means=None,
    scales=1.0,
    weights=None,
    shuffle=True,
    random_state=None,
    return_centers=False,
):
    r"""Draw i.i.d. samples from a mixture of spherical Gaussians.

    By default, the test distribution of Cohen et al. (2021, §5;
    ``spec/cohen_ktuple.md`` §10.1): a uniform mixture of ``n_clusters``
    standard Gaussians :math:`N(\mu, I_d)` with means
    :math:`\{R e_i, -R e_i\}_{i=1..k/2}`, where :math:`e_i` is the i-th
    standard basis vector and :math:`R` is ``separation``. Component
    :math:`2i` has mean :math:`R e_{i+1}` and component :math:`2i + 1` mean
    :math:`-R e_{i+1}`. The closest two means are :math:`2R` apart when
    ``n_clusters == 2`` and :math:`\sqrt{2} R` apart otherwise.

    With ``means``, any spherical mixture: component ``j`` is
    :math:`N(\mu_j, \sigma_j^2 I_d)` with :math:`\mu_j` = ``means[j]`` and
    :math:`\sigma_j` = ``scales[j]``.

    Parameters
    ----------
    n_samples : int, default=1000
        Number of samples.
    n_clusters : int, default=2
        Number of components, even, for the default means. Ignored when
        ``means`` is given.
    n_features : int, default=1
        Dimension; at least ``n_clusters / 2`` for the default means. Ignored
        when ``means`` is given.
    separation : float, default=None
        :math:`R > 0` of the default means; ``None`` means 32, the smallest
        separation of the papers' first test (spec §10.1, Test1). Not allowed
        together with ``means``.
    means : array-like of shape (n_clusters, n_features), default=None
        The component means, in place of the default ones.
    scales : float or array-like of shape (n_clusters,), default=1.0
        Standard deviation of every component (the same for all if a float).
    weights : array-like of shape (n_clusters,), default=None
        Mixing weights, non-negative, normalised to sum to 1; ``None`` means
        uniform.
    shuffle : bool, default=True
        Samples come in i.i.d. order; with ``shuffle=False`` they are sorted by
        component (``y`` non-decreasing).
    random_state : None, int or numpy.random.Generator, default=None
        ``None`` draws fresh entropy from the operating system; see
        :func:`skdpcluster.utils.check_random_state`.
    return_centers : bool, default=False
        Also return the component means.

    Returns
    -------
    X : ndarray of shape (n_samples, n_features)
        The samples.
    y : ndarray of shape (n_samples,)
        The component of every sample.
    centers : ndarray of shape (n_clusters, n_features)
        The component means; only when ``return_centers`` is True.

    Raises
    ------
    ValueError
        For a bad parameter, such as an odd ``n_clusters`` or ``n_features <
        n_clusters / 2`` for the default means, or shapes that do not match
        the number of components.

    See Also
    --------
    sklearn.datasets.make_blobs : Isotropic Gaussian blobs with fixed sizes.

    Examples
    --------
    >>> from skdpcluster.datasets import make_separated_mixture
    >>> X, y, centers = make_separated_mixture(
    ...     1000, n_clusters=4, n_features=2, separation=64, random_state=0,
    ...     return_centers=True)
    >>> X.shape, y.shape
    ((1000, 2), (1000,))
    >>> centers
    array([[ 64.,   0.],
           [-64.,   0.],
           [  0.,  64.],
           [  0., -64.]])
    """
    _check_count(n_samples, "n_samples", minimum=1)
    centers = _component_means(n_clusters, n_features, separation, means)
    n_components = len(centers)
    scales = _component_values(scales, n_components, "scales", positive=True)
    probabilities = _mixing_weights(weights, n_components)
    rng = check_random_state(random_state)
    y = rng.choice(n_components, size=n_samples, p=probabilities)
    if not shuffle:
        y = np.sort(y)
    X = rng.standard_normal((n_samples, centers.shape[1]))
    X *= scales[y, None]
    X += centers[y]
    return (X, y, centers) if return_centers else (X, y)


def _check_count(value, name, minimum):
    """Refuse anything but an int >= ``minimum``, naming the parameter."""
    if isinstance(value, bool) or not isinstance(value, Integral) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {name}={value!r}.")


def _component_means(n_clusters, n_features, separation, means):
    """The (n_clusters, n_features) means: ``means`` checked, or ``{±R e_i}``."""
    if means is None:
        return _axis_means(n_clusters, n_features, 32.0 if separation is None else separation)
    if separation is not None:
        raise ValueError("Give separation or means, not both.")
    means = np.array(means, dtype=np.float64)
    if means.ndim != 2 or means.size == 0 or not np.all(np.isfinite(means)):
        raise ValueError(
            "means must be a finite array of shape (n_clusters, n_features), "
            f"got shape {means.shape}."
        )
    return means


def _axis_means(n_clusters, n_features, separation):
    """Means ``R e_1, -R e_1, R e_2, -R e_2, ...`` (spec §10.1)."""
    _check_count(n_clusters, "n_clusters", minimum=2)
    _check_count(n_features, "n_features", minimum=1)
    if isinstance(separation, bool) or not isinstance(separation, Real) or not (
        0 < separation < math.inf
    ):
        raise ValueError(f"separation must be a finite number > 0, got separation={separation!r}.")
    if n_clusters % 2:
        raise ValueError(
            f"The means ±separation·e_i need an even n_clusters, got n_clusters={n_clusters}; "
            "pass means=... for an odd number of components."
        )
    if n_features < n_clusters // 2:
        raise ValueError(
            f"The means ±separation·e_i for n_clusters={n_clusters} need n_features >= "
            f"{n_clusters // 2}, got n_features={n_features}; pass means=... for other layouts."
        )
    centers = np.zeros((n_clusters, n_features))
    axes = np.arange(n_clusters // 2)
    centers[2 * axes, axes] = separation
    centers[2 * axes + 1, axes] = -separation
    return centers


def _component_values(values, n_components, name, positive):
    """A float or a (n_components,) array of finite values > 0 (or >= 0), as (n_components,)."""
    values = np.array(values, dtype=np.float64)
    if values.ndim > 1 or (values.ndim == 1 and len(values) != n_components):
        raise ValueError(
            f"{name} must be a float or have shape ({n_components},), got shape {values.shape}."
        )
    valid = values > 0 if positive else values >= 0
    if not np.all(np.isfinite(values) & valid):
        bound = "> 0" if positive else ">= 0"
        raise ValueError(f"{name} must be finite and {bound}, got {name}={values!r}.")
    return np.broadcast_to(values, (n_components,))


def _mixing_weights(weights, n_components):
    """Mixing probabilities: uniform, or ``weights`` normalised."""
    if weights is None:
        return np.full(n_components, 1.0 / n_components)
    weights = _component_values(weights, n_components, "weights", positive=False)
    if not weights.sum() > 0:
        raise ValueError(f"weights must have a positive sum, got weights={weights!r}.")
    return weights / weights.sum()
