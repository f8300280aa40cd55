"""Data sets of the papers: the separated Gaussian mixtures of the k-tuple papers, and
loaders of local copies of FedDP-KMeans's real data (US Census ACSIncome, Stack Overflow)."""

import csv
import math
from numbers import Integral, Real
from pathlib import Path

import numpy as np
from sklearn.utils import Bunch

from skdpcluster.utils import check_random_state

__all__ = ["load_acs_income", "load_stackoverflow_embeddings", "make_separated_mixture"]

#: The categorical ACSIncome features FedDP-KMeans one-hot encodes (Scott et al. 2025, App. G.1).
ACS_CATEGORICAL = ("SCHL", "MAR", "OCCP", "POBP", "RELP", "SEX", "RAC1P")


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


# ---------------------------------------------------------------------------
# FedDP-KMeans's real data sets, from local files
# ---------------------------------------------------------------------------


def _category(value):
    """A categorical code as a string, ``"5.0"`` and ``"5"`` alike."""
    value = value.strip()
    try:
        number = float(value)
    except ValueError:
        return value
    return str(int(number)) if number.is_integer() else value


def _random_rows(rng, pool, count, name):
    """``count`` distinct random rows of ``pool``, refused (naming ``name``) if there are fewer."""
    if count > len(pool):
        raise ValueError(f"{name}={count} exceeds the {len(pool)} rows available; pass a "
                         f"smaller {name}.")
    return pool[rng.choice(len(pool), count, replace=False)]


def load_acs_income(path, *, cow=5, n_server_in=20, n_server_out=1000, random_state=0):
    r"""Load a local US Census ACSIncome file as FedDP-KMeans's federated data set.

    Scott, Lampert & Saulpic (ICML 2025), App. G.1 (``spec/feddp_kmeans.md``
    §6.2): one client per state; the clients hold the people of one class of
    worker (``COW`` = ``cow``: 2 not-for-profit, 5 federal government, 6
    self-employed); every row is the one-hot encoding of the categorical
    features ``SCHL, MAR, OCCP, POBP, RELP, SEX, RAC1P`` (the numeric
    ``AGEP``, ``WKHP`` and ``COW`` itself are dropped), so every row has norm
    :math:`\sqrt 7`. The server data is ``n_server_in`` random client rows
    (in distribution) and ``n_server_out`` random rows of other classes of
    worker (out of distribution). The paper's 90/10 train/validation split of
    every state is left to the caller.

    Parameters
    ----------
    path : str or path-like
        A CSV file with a header row and at least the columns ``ST`` (state),
        ``COW`` and the seven categorical features, one row per person: the
        rows of folktables' ``ACSIncome`` problem (2018, 1-Year, person
        survey) with its group column ``ST``, for example
        ``pandas.concat([features, group], axis=1).to_csv(path)`` of
        ``ACSIncome.df_to_pandas``. Other columns are ignored. Codes may be
        written as integers or floats (``"5"`` or ``"5.0"``).
    cow : int, default=5
        The class of worker held by the clients.
    n_server_in, n_server_out : int, default=20, 1000
        The server's in-distribution and out-of-distribution rows.
    random_state : None, int or numpy.random.Generator, default=0
        Draws the server rows.

    Returns
    -------
    data : Bunch
        ``data`` (n, d) float array of one-hot rows, ``client_ids`` (n,)
        state codes, ``server`` (n_server_in + n_server_out, d),
        ``feature_names`` (d,) as ``"SCHL=21"``.

    Raises
    ------
    ValueError
        If a needed column is missing, no row has ``COW == cow``, or the
        server asks for more rows than there are.
    """
    with Path(path).open(newline="") as handle:
        reader = csv.DictReader(handle)
        needed = ("ST", "COW", *ACS_CATEGORICAL)
        missing = [column for column in needed if column not in (reader.fieldnames or ())]
        if missing:
            raise ValueError(f"path={str(path)!r} lacks the ACSIncome columns {missing}; the "
                             f"file needs a header with {list(needed)}.")
        records = [[_category(row[column]) for column in needed] for row in reader]
    table = np.array(records, dtype=object).reshape(-1, len(needed))
    names = [f"{feature}={value}" for j, feature in enumerate(ACS_CATEGORICAL)
             for value in sorted(set(table[:, 2 + j]))]
    index = {name: i for i, name in enumerate(names)}
    onehot = np.zeros((len(table), len(names)))
    for j, feature in enumerate(ACS_CATEGORICAL):
        columns = [index[f"{feature}={value}"] for value in table[:, 2 + j]]
        onehot[np.arange(len(table)), columns] = 1.0
    chosen = table[:, 1] == _category(str(cow))
    if not chosen.any():
        raise ValueError(f"no row has COW == {cow}; pass cow= one of "
                         f"{sorted(set(table[:, 1]))}.")
    rng = check_random_state(random_state)
    server = np.vstack([_random_rows(rng, onehot[chosen], n_server_in, "n_server_in"),
                        _random_rows(rng, onehot[~chosen], n_server_out, "n_server_out")])
    return Bunch(data=onehot[chosen], client_ids=table[chosen, 0].astype(str), server=server,
                 feature_names=np.array(names))


def load_stackoverflow_embeddings(path, *, tags=("github", "pdf"), n_server_in=20,
                                  n_server_out=1000, random_state=0):
    """Load local Stack Overflow question embeddings as FedDP-KMeans's federated data set.

    Scott, Lampert & Saulpic (ICML 2025), App. G.1 (``spec/feddp_kmeans.md``
    §6.2): every question of the TFF Stack Overflow data embedded by
    Sentence-BERT ``all-MiniLM-L6-v2`` (d = 384, unit norm); for a pair of
    tags, the clients are the users with questions whose first tag is in the
    pair, holding those questions. The server data is ``n_server_in`` random
    in-topic questions and the first ``n_server_out`` questions (in file
    order) whose first tag is outside the pair.

    Parameters
    ----------
    path : str or path-like
        A NumPy ``.npz`` file with the arrays ``embeddings`` (n, d) float,
        ``user_ids`` (n,) and ``tags`` (n,) of strings (each question's first
        tag), for example written by ``numpy.savez(path, embeddings=...,
        user_ids=..., tags=...)`` after embedding the questions' ``tokens``.
    tags : pair of str, default=("github", "pdf")
        The topic pair (the paper's main-text pair).
    n_server_in, n_server_out : int, default=20, 1000
        The server's in-topic and out-of-topic questions.
    random_state : None, int or numpy.random.Generator, default=0
        Draws the in-topic server questions.

    Returns
    -------
    data : Bunch
        ``data`` (n, d) the clients' embeddings, ``client_ids`` (n,) their
        users, ``server`` (n_server_in + n_server_out, d).

    Raises
    ------
    ValueError
        If an array is missing or the shapes disagree, no question carries
        the tags, or the server asks for more questions than there are.
    """
    with np.load(path, allow_pickle=False) as archive:
        missing = [key for key in ("embeddings", "user_ids", "tags") if key not in archive]
        if missing:
            raise ValueError(f"path={str(path)!r} lacks the arrays {missing}; save embeddings, "
                             "user_ids and tags with numpy.savez.")
        embeddings = np.asarray(archive["embeddings"], dtype=float)
        users, first_tags = archive["user_ids"], archive["tags"].astype(str)
    if embeddings.ndim != 2 or not len(embeddings) == len(users) == len(first_tags):
        raise ValueError(f"embeddings must be 2-D with one row per entry of user_ids and tags, "
                         f"got shapes {embeddings.shape}, {users.shape}, {first_tags.shape}.")
    in_topic = np.isin(first_tags, list(tags))
    if not in_topic.any():
        raise ValueError(f"no question has its first tag in tags={tuple(tags)!r}; choose tags "
                         "present in the file.")
    outside = embeddings[~in_topic][:n_server_out]
    if len(outside) < n_server_out:
        raise ValueError(f"n_server_out={n_server_out} exceeds the {len(outside)} out-of-topic "
                         "questions; pass a smaller n_server_out.")
    rng = check_random_state(random_state)
    server = np.vstack([_random_rows(rng, embeddings[in_topic], n_server_in, "n_server_in"),
                        outside])
    return Bunch(data=embeddings[in_topic], client_ids=users[in_topic], server=server)
