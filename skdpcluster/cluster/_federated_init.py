r"""FedDP-Init and FedDP-Lloyds as client statistics, a reducer and server steps.

Scott, Lampert & Saulpic, "Differentially Private Federated k-Means Clustering
with Server-Side Data", ICML 2025 (``spec/feddp_kmeans.md``). The estimator
:class:`~skdpcluster.cluster._federated.FederatedPrivateKMeans` validates its
input and plans the budget; the functions here trust their input.

Every round of the protocol has the shape of spec §8.2:

1. a deterministic **client statistic** ``statistic(shard, **broadcast)``
   runs on every shard (a group of whole clients) and returns a tuple of
   arrays; client-level clipping happens inside it, before anything leaves
   the client;
2. :class:`FederatedExecutor` **sums** the partial results in shard order
   (in process, with joblib, or on a Dask ``distributed`` cluster where the
   shards stay on the workers as futures);
3. the **server** adds noise once to the sum (through
   :mod:`skdpcluster.mechanisms`) and updates its state.

Shards depend only on the client ids and the module constant
:data:`SHARD_ROWS`, and the partial sums are added in a fixed order, so the
aggregate (and the whole fit) does not depend on ``n_jobs`` or the engine.
"""

import functools
import math
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import scipy.linalg
from joblib import Parallel, delayed
from scipy import sparse
from sklearn.base import clone
from sklearn.cluster import kmeans_plusplus

from skdpcluster.averaging import _project_onto_ball
from skdpcluster.averaging._common import _UNIT_ROUNDOFF, _split_evenly, project_into_ball
from skdpcluster.cluster._stable_init import nearest_centers, nearest_projected_centers
from skdpcluster.mechanisms import (
    PrivacyEvent,
    gaussian_mechanism,
    gaussian_sigma,
    laplace_mechanism,
)
from skdpcluster.utils._compat import single_threaded
from skdpcluster.utils._errstate import in_caller_errstate

__all__ = [
    "FederatedBudget",
    "FederatedExecutor",
    "Release",
    "build_shards",
    "clip_rows",
    "cluster_sums_statistic",
    "feddp_init",
    "federated_lloyd",
    "plan_budget",
    "second_moment_statistic",
    "server_histogram_statistic",
    "sphere_packing",
]

#: Rows per shard: clients are packed, whole and in order of their id, into shards whose
#: first client starts within each block of SHARD_ROWS rows (one Dask partition each).
SHARD_ROWS = 8192
#: The releases of the protocol, in the order they happen (spec §2, §3).
STEPS = ("projection", "weights", "sums", "counts", "lloyd_sums", "lloyd_counts")
GAUSSIAN_STEPS = frozenset({"projection", "sums", "lloyd_sums"})
INIT_STEPS = ("projection", "weights", "sums", "counts")
#: Paper App. H.1 rule-of-thumb splits of eps_init = eps1 + eps2 + eps3G + eps3L (spec §2).
DEFAULT_INIT_SPLIT = {
    "sample": {"projection": 0.2, "weights": 0.2, "sums": 0.45, "counts": 0.15},
    "client": {"projection": 0.35, "weights": 0.1, "sums": 0.45, "counts": 0.1},
}
#: Share of a FedDP-Lloyds budget given to the Gaussian sums (reference code default, spec §3).
LLOYD_GAUSSIAN_SHARE = 0.5
#: Rounds of communication of FedDP-Init (steps 1 to 3).
INIT_ROUNDS = 3
#: Sensitivity of each release per unit of its bound: (add_remove, replace_one). The second
#: moment is a PSD matrix (||A - B||_F <= sqrt(2) max norm); the others are differences of
#: two bounded contributions.
SENSITIVITY_FACTOR = {
    "projection": (1.0, math.sqrt(2.0)),
    "weights": (1.0, 2.0),
    "sums": (1.0, 2.0),
    "counts": (1.0, 2.0),
    "lloyd_sums": (1.0, 2.0),
    "lloyd_counts": (1.0, 2.0),
}
#: A noisy count below max(1, LOW_COUNT_SCALES * b) is not trusted (spec §2 step 11).
LOW_COUNT_SCALES = 3.0
#: Weight floor of the server proxy when fewer than k points pass the filter (spec §8.2).
WEIGHT_FLOOR = 1e-9
#: Value discretisation of the PLD accountant (the reference code's 1e-3, spec §1.4).
PLD_DISCRETIZATION = 1e-3


# ---------------------------------------------------------------------------
# Budget
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Release:
    """The planned noise of one step: mechanism, (epsilon, delta) per use, sensitivity, scale."""

    step: str
    mechanism: str
    epsilon: float
    delta: float
    sensitivity: float
    scale: float
    count: int
    calibration: str = "analytic"


@dataclass(frozen=True)
class FederatedBudget:
    """Every release of a fit and the (epsilon, delta) the fit is charged.

    ``accounting`` is ``"basic"`` (the ledger's events sum to ``total``) or
    ``"pld"`` (the events carry zero cost and one composite event carries
    ``total``, the PLD bound of their composition).
    """

    releases: dict
    accounting: str
    total: tuple
    multiplier: float = 1.0
    details: dict = field(default_factory=dict)

    def as_dict(self):
        """Public summary: per step, the mechanism, (epsilon, delta) per use, scale and uses."""
        steps = {name: {k: v for k, v in asdict(r).items() if k != "step"}
                 for name, r in self.releases.items()}
        return {"accounting": self.accounting, "epsilon": self.total[0], "delta": self.total[1],
                "pld_multiplier": self.multiplier, "steps": steps}


def _sum_of_uses(per_use, counts):
    """The sum over every use of every step (``counts[step]`` uses of ``per_use[step]``), as the
    ledger adds its events: exactly, then rounded once."""
    return math.fsum(value for step, value in per_use.items() for _ in range(counts[step]))


def _releases(shares, epsilon, delta, sensitivities, counts, calibration, multiplier=1.0):
    """Basic-composition calibration: step s gets ``share * epsilon / uses`` per use, and every
    Gaussian use the same slice of ``delta``, so that the events sum to (epsilon, delta).

    Both are rounded down by a few ulps where the rounded quotients would sum to more than
    requested (``multiplier`` times epsilon), so that the ledger never exceeds the request
    (review R8 L6)."""
    n_gaussian = sum(counts[s] for s in shares if s in GAUSSIAN_STEPS)
    step_delta = _split_evenly(delta, n_gaussian) if n_gaussian else 0.0
    per_use = {step: multiplier * share * epsilon / counts[step] for step, share in shares.items()}
    while _sum_of_uses(per_use, counts) > multiplier * epsilon:
        per_use = {step: math.nextafter(eps, 0.0) for step, eps in per_use.items()}
    releases = {}
    for step in shares:
        eps = per_use[step]
        sensitivity = sensitivities[step]
        if step in GAUSSIAN_STEPS:
            scale = gaussian_sigma(sensitivity, eps, step_delta, calibration)
            releases[step] = Release(step, "gaussian", eps, step_delta, sensitivity, scale,
                                     counts[step], calibration)
        else:
            releases[step] = Release(step, "laplace", eps, 0.0, sensitivity, sensitivity / eps,
                                     counts[step], "laplace")
    return releases


def _pld_epsilon(releases, delta):
    """Epsilon at ``delta`` of the PLD composition of every use of every release (spec §1.4)."""
    from dp_accounting.pld import privacy_loss_distribution as pld

    total = None
    for release in releases.values():
        unit_scale = release.scale / release.sensitivity
        make = (pld.from_gaussian_mechanism if release.mechanism == "gaussian"
                else pld.from_laplace_mechanism)
        one = make(unit_scale, value_discretization_interval=PLD_DISCRETIZATION)
        one = one.self_compose(release.count) if release.count > 1 else one
        total = one if total is None else total.compose(one)
    return float(total.get_epsilon_for_delta(delta))


def _pld_budget(shares, epsilon, delta, sensitivities, counts):
    """Scale every step's epsilon by the largest multiplier whose PLD total is <= epsilon.

    Returns ``None`` when even the basic calibration is not certified by PLD
    (then basic composition is used).
    """
    def total(multiplier):
        return _pld_epsilon(_releases(shares, epsilon, delta, sensitivities, counts, "analytic",
                                      multiplier), delta)

    if total(1.0) > epsilon:
        return None
    low, high = 1.0, 2.0
    while total(high) <= epsilon and high < 2.0**20:
        low, high = high, 2.0 * high
    while high / low > 1.0 + 1e-4:
        middle = math.sqrt(low * high)
        low, high = (middle, high) if total(middle) <= epsilon else (low, middle)
    releases = _releases(shares, epsilon, delta, sensitivities, counts, "analytic", low)
    return FederatedBudget(releases, "pld", (_pld_epsilon(releases, delta), float(delta)), low,
                           {"value_discretization_interval": PLD_DISCRETIZATION})


def plan_budget(shares, epsilon, delta, sensitivities, counts, *, calibration, accounting):
    r"""Calibrate every release of a fit (public values only).

    ``"basic"``: step :math:`s` with share :math:`f_s` and :math:`T_s` uses
    gets :math:`\varepsilon_s = f_s\varepsilon/T_s` per use (so FedDP-Lloyds
    uses :math:`(\varepsilon_{4G}/T, \delta_{4}/T)` and
    :math:`\mathrm{Lap}(T/\varepsilon_{4L})`, the §3.2 text of the paper), and
    every Gaussian use :math:`\delta/n_G`; by basic composition (Theorem 1,
    with the deltas added, spec §1.4) the fit is
    :math:`(\varepsilon, \delta)`-DP. ``"pld"``: every :math:`\varepsilon_s`
    is multiplied by the largest :math:`s \ge 1` for which the
    privacy-loss-distribution accountant of ``dp_accounting`` certifies the
    composition at :math:`(\le\varepsilon, \delta)` (spec §8.1). Returns
    ``None`` for ``"pld"`` when ``dp_accounting`` cannot be imported.
    """
    if accounting == "pld":
        try:
            import dp_accounting  # noqa: F401
        except ImportError:
            return None
        budget = _pld_budget(shares, epsilon, delta, sensitivities, counts)
        if budget is not None:
            return budget
    releases = _releases(shares, epsilon, delta, sensitivities, counts, calibration)
    spent = (_sum_of_uses({s: r.epsilon for s, r in releases.items()}, counts),
             _sum_of_uses({s: r.delta for s, r in releases.items()}, counts))
    return FederatedBudget(releases, "basic", spent)


def _release(value, release, rng, label, neighbouring):
    """Noise one aggregate through :mod:`skdpcluster.mechanisms` as ``release`` plans."""
    common = dict(sensitivity=release.sensitivity, epsilon=release.epsilon, rng=rng,
                  label=f"federated/{label}", neighbouring=neighbouring)
    if release.mechanism == "gaussian":
        return gaussian_mechanism(value, delta=release.delta, calibration=release.calibration,
                                  **common)
    return laplace_mechanism(value, **common)


def price_events(events, budget, neighbouring, privacy_unit):
    """The ledger of a fit: the events (basic), or zero-cost events plus the PLD total.

    Every event records the unit of privacy (``"sample"`` or ``"client"``)
    beside its ``neighbouring`` relation.
    """
    events = [replace(e, details={**e.details, "privacy_unit": privacy_unit}) for e in events]
    if budget.accounting == "basic":
        return events
    priced = [replace(e, epsilon=0.0, delta=0.0,
                      details={**e.details, "calibrated_epsilon": e.epsilon,
                               "calibrated_delta": e.delta, "accounted_in": "federated/pld_total"})
              for e in events]
    composite = PrivacyEvent(
        "pld_composition", budget.total[0], budget.total[1], label="federated/pld_total",
        neighbouring=neighbouring,
        details={"composition": "privacy loss distribution (dp_accounting)",
                 "n_releases": len(events), "privacy_unit": privacy_unit, **budget.details})
    return priced + [composite]


# ---------------------------------------------------------------------------
# Shards and the executor
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ClientShard:
    """Rows of whole clients, each client's rows contiguous; ``sizes``: rows per client."""

    X: np.ndarray
    sizes: np.ndarray

    @property
    def row_client(self):
        """Index (within the shard) of the client of every row."""
        return np.repeat(np.arange(len(self.sizes)), self.sizes)


def build_shards(X, client_ids=None):
    """Pack whole clients, in sorted id order, into shards (one per ``SHARD_ROWS`` block).

    Without ``client_ids`` every row is its own client. The packing depends
    only on the ids, never on ``n_jobs`` or the engine.

    Returns
    -------
    list of ClientShard
    """
    if client_ids is None:
        return [ClientShard(X[start:start + SHARD_ROWS], np.ones(len(X[start:start + SHARD_ROWS]),
                                                                  dtype=np.intp))
                for start in range(0, len(X), SHARD_ROWS)]
    _, codes = np.unique(client_ids, return_inverse=True)
    codes = codes.reshape(-1)
    order = np.argsort(codes, kind="stable")
    sizes = np.bincount(codes)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    shard_of_client = starts // SHARD_ROWS
    X_sorted = X[order]
    shards = []
    for shard in np.unique(shard_of_client):
        clients = np.flatnonzero(shard_of_client == shard)
        rows = slice(starts[clients[0]], starts[clients[-1]] + sizes[clients[-1]])
        shards.append(ClientShard(X_sorted[rows], sizes[clients]))
    return shards


def clip_rows(X, center, radius):
    """Rows centred at ``center`` and projected onto the ball B(0, radius) (a new array).

    Every projected row's exact norm is at most ``radius``
    (:func:`~skdpcluster.averaging._common.project_into_ball`); rows inside
    are the centred rows bit for bit.
    """
    rows = X - center
    project_into_ball(rows, radius)
    return rows


def _sum_in_order(partials):
    """Element-wise sum of tuples of arrays, always in the same (shard) order."""
    total = [np.array(part, dtype=np.float64) for part in partials[0]]
    for partial in partials[1:]:
        for accumulator, part in zip(total, partial):
            accumulator += part
    return total


def dask_client():
    """The running ``distributed`` client; ``ValueError`` (before any spend) when there is none."""
    try:
        import distributed
    except ImportError:
        raise ValueError("executor='dask' needs the 'distributed' package: pip install "
                         "'skdpcluster[dask]'.") from None
    try:
        return distributed.get_client()
    except ValueError:
        raise ValueError("executor='dask' needs a running distributed.Client (create one with "
                         "distributed.Client(...) before calling fit).") from None


class FederatedExecutor:
    """Run client statistics on every shard and return their sum (spec §8.3).

    ``backend="joblib"``: ``joblib.Parallel(n_jobs, prefer="threads")`` over
    the shards (any joblib backend configured with
    :func:`joblib.parallel_config` is honoured). ``backend="dask"``: the
    shards are scattered once to the workers of the running
    ``distributed.Client`` and stay there as futures for all rounds; each
    round maps the statistic over them and gathers the partial sums. Only
    the partial sums travel back; the server adds the noise.
    """

    def __init__(self, shards, backend="joblib", n_jobs=None):
        self.shards = shards
        self.backend = backend
        self.n_jobs = n_jobs
        self.n_rounds = 0
        self._client = self._handles = None

    def __enter__(self):
        if self.backend == "dask":
            self._client = dask_client()
            self._handles = self._client.scatter(self.shards, hash=False)
        return self

    def __exit__(self, *exc_info):
        if self._handles is not None:
            self._client.cancel(self._handles)
            self._handles = None
        return False

    def reduce(self, statistic, **broadcast):
        """One round: ``sum(statistic(shard, **broadcast) for shard in shards)``, as arrays."""
        statistic = in_caller_errstate(statistic)
        if self._handles is not None:
            futures = self._client.map(_single_threaded, self._handles, statistic=statistic,
                                       pure=False, **broadcast)
            partials = self._client.gather(futures)
        else:
            with single_threaded():
                partials = Parallel(n_jobs=self.n_jobs, prefer="threads")(
                    delayed(statistic)(shard, **broadcast) for shard in self.shards)
        self.n_rounds += 1
        return _sum_in_order(partials)


def _client_shard(block, *, center, radius, chunk_is_client):
    """The shard of one Dask chunk: its rows clipped, each row a client or the chunk one client."""
    X = clip_rows(np.asarray(block, dtype=np.float64), center, radius)
    sizes = np.array([len(X)]) if chunk_is_client else np.ones(len(X), dtype=np.intp)
    return ClientShard(X, sizes)


def _shard_statistic(shard, statistic, broadcast):
    return tuple(_single_threaded(shard, statistic=statistic, **broadcast))


class ChunkedFederatedExecutor:
    """:class:`FederatedExecutor` for the rows of a Dask array: one shard per chunk.

    Each round is one map-reduce (:mod:`skdpcluster.utils._data`): every
    chunk is clipped and turned into a :class:`ClientShard` where it lives
    (every row a client, or with ``chunk_is_client`` the whole chunk one
    client), the statistic runs on it, and the partial sums are added in a
    tree; the server adds the noise to the total. The statistics, their
    clipping and so their sensitivities are those of the in-memory shards.
    """

    def __init__(self, rows, center, radius, chunk_is_client=False):
        self.rows = rows.with_chunks(functools.partial(
            _client_shard, center=center, radius=radius, chunk_is_client=chunk_is_client))
        self.n_rounds = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return False

    def reduce(self, statistic, **broadcast):
        """One round: the sum over the chunks of ``statistic(shard, **broadcast)``, as arrays."""
        total = self.rows.map_reduce(_shard_statistic, statistic, broadcast)
        self.n_rounds += 1
        return [np.array(part, dtype=np.float64) for part in total]


def _single_threaded(shard, *, statistic, **broadcast):
    """Run a statistic with one BLAS thread (a Dask task; parallelism comes from the shards).

    Shards are small: native threads inside one cost more than they give on a
    busy machine, and a fixed thread count keeps every engine's arithmetic
    identical.
    """
    with single_threaded():
        return statistic(shard, **broadcast)


# ---------------------------------------------------------------------------
# Client statistics (deterministic; client-level clipping inside)
# ---------------------------------------------------------------------------


def _scaled_clients(shard):
    r"""Every client's rows scaled by a power of two: ``(W, e, nonzero)``.

    :math:`e_j` is the binary exponent of the largest :math:`|x_{ia}|` over
    client j's rows, so the largest coordinate of :math:`W_j = 2^{-e_j}X_j` is
    in :math:`[1/2, 1)` and no square or product of it over- or underflows at
    any scale of the data. The scaling is exact except for coordinates that
    become subnormal (absolute error at most :math:`2^{-1075}` each, beside a
    largest coordinate :math:`\ge 1/2`). ``nonzero`` is False for a client
    with no rows or only zero rows (``e_j = 0`` then).
    """
    X, sizes = shard.X, shard.sizes
    peaks = np.zeros(len(sizes))
    filled = sizes > 0
    if np.any(filled):
        starts = np.cumsum(sizes) - sizes
        peaks[filled] = np.maximum.reduceat(np.max(np.abs(X), axis=1), starts[filled])
    exponents = np.frexp(peaks)[1].astype(np.int64)
    return np.ldexp(X, -np.repeat(exponents, sizes)[:, None]), exponents, peaks > 0


def _proven_clip_factors(bound, upper, exponents):
    r"""Per client :math:`\min(1, a_j)` with :math:`a_j\,2^{e_j}U_j \le` ``bound`` exactly.

    ``upper`` holds :math:`U_j`, an upper bound on the exact norm of client
    j's contribution in units of :math:`2^{e_j}` (``exponents``); a client
    with :math:`U_j = 0` contributes nothing and gets 1. With ``bound`` =
    :math:`m\,2^{b}` (:func:`math.frexp`, exact), :math:`a_j` is
    :math:`m/U_j` and then its product by :math:`2^{b - e_j}`, each rounded
    to nearest and then moved one float toward zero (as in
    :func:`~skdpcluster.averaging._common.scale_into_ball`): a result rounded
    up by at most half a unit in the last place, or an underflow, ends below
    the exact value; an overflow gives :math:`+\infty`, and then the exact
    ratio is above 1. So the client's scaled contribution has an exact norm
    at most ``bound`` at any scale (the sensitivity the noise is sized for);
    in the range of normal floats :math:`a_j` is the plain ratio within
    2 ulps.
    """
    mantissa, bound_exponent = math.frexp(bound)
    factors = np.ones(len(upper))
    positive = upper > 0
    with np.errstate(over="ignore", under="ignore", divide="ignore"):
        quotient = np.nextafter(mantissa / upper[positive], 0.0)
        ratio = np.nextafter(np.ldexp(quotient, bound_exponent - exponents[positive]), 0.0)
    factors[positive] = np.minimum(1.0, ratio)
    return factors


def _second_moment_norms(shard):
    r"""Per client :math:`U_j \ge \|X_j^\top X_j\|_F / 4^{e_j}` and the exponents :math:`2e_j`.

    The Gram matrix is that of :math:`W_j` (:func:`_scaled_clients`, so the
    norm neither under- nor overflows: the norm at radius :math:`10^{-100}`
    was 0 and the clip was skipped, review RC-08), of side :math:`q =
    \min(n_j, d)` and inner dimension :math:`m = \max(n_j, d)`
    (:math:`\|w\|^2` for a one-row client; nothing for an empty one). Its
    computed entries err by at most :math:`\gamma_m \sum_i |w_{ia}||w_{ib}|
    \le \gamma_m \sqrt{G_{aa}G_{bb}}` (any order of summation, Cauchy-Schwarz),
    so by at most :math:`\gamma_m \mathrm{tr}\,G \le \gamma_m\sqrt q\,\|G\|_F`
    in Frobenius norm; the norm of a sum of :math:`q^2` non-negative squares
    and its square root add :math:`(q^2/2 + 2)u` (:math:`u = 2^{-53}`); the
    subnormal roundings and underflows add less than :math:`u` relative to
    :math:`\|G\|_F \ge 1/4` (the largest coordinate's diagonal entry). So
    :math:`U_j = N_j(1 + 2u(m\sqrt q + q^2 + 8))`, the computed norm
    :math:`N_j` times a margin twice what is needed (the other half covers
    the rounding of this product), bounds the exact norm. At ordinary scales
    :math:`4^{e_j}N_j` is the unscaled norm bit for bit.
    """
    W, exponents, _ = _scaled_clients(shard)
    sizes, n_features = shard.sizes, shard.X.shape[1]
    starts = np.cumsum(sizes) - sizes
    norms = np.zeros(len(sizes))
    single = starts[sizes == 1]
    norms[sizes == 1] = np.einsum("ij,ij->i", W[single], W[single])
    for j in np.flatnonzero(sizes > 1):
        rows = W[starts[j]:starts[j] + sizes[j]]
        gram = rows.T @ rows if len(rows) > n_features else rows @ rows.T
        norms[j] = np.linalg.norm(gram)
    side, inner = np.minimum(sizes, n_features), np.maximum(sizes, n_features)
    margin = 2.0 * _UNIT_ROUNDOFF * (inner * np.sqrt(side) + side**2 + 8.0)
    return norms * (1.0 + margin), 2 * exponents


def second_moment_statistic(shard, *, bound=None):
    r"""Step 1 of Algorithm 1: :math:`\sum_j A_j`, :math:`A_j = X_j^\top X_j` (uncentred).

    With ``bound`` (client level, spec §4), each :math:`A_j` is first scaled
    to Frobenius norm at most ``bound``, exactly and at any scale of the data
    (:func:`_second_moment_norms`, :func:`_proven_clip_factors`).
    """
    X = shard.X
    if bound is None:
        return (X.T @ X,)
    weights = np.repeat(_proven_clip_factors(bound, *_second_moment_norms(shard)), shard.sizes)
    return ((X * weights[:, None]).T @ X,)


def server_histogram_statistic(shard, *, components, server_points, bound=None):
    r"""Step 2 of Algorithm 1: :math:`w_q(\Pi P^j)`, rows whose nearest projected server point is q.

    ``components`` is :math:`V_k` (d x p) and ``server_points`` is
    :math:`QV_k`. With ``bound`` (client level), client j's histogram, of L1
    norm :math:`n_j`, is scaled by :math:`\min(1, C_2/n_j)`. Each row's bin is
    a function of the row alone (as in :func:`cluster_sums_statistic`).
    """
    labels = nearest_projected_centers(shard.X, components, server_points)
    weights = None
    if bound is not None:
        weights = np.repeat(_count_clip_factors(shard.sizes, bound), shard.sizes)
    return (np.bincount(labels, weights=weights, minlength=len(server_points)).astype(float),)


def _count_clip_factors(sizes, bound):
    r""":math:`\min(1, C/n_j)` per client, with :math:`n_j \cdot` factor :math:`\le C` exactly."""
    return _proven_clip_factors(bound, sizes.astype(float), np.zeros(len(sizes), dtype=np.int64))


def _joint_clip_factors(shard, labels, n_clusters, sum_bound, count_bound):
    r"""Per client :math:`\gamma_j = \min(1, C_s/\|M_j\|_F, C_c/\|n_j\|_1)`.

    :math:`M_j` is the k x d matrix of client j's per-cluster sums and
    :math:`\|n_j\|_1 = n_j`. Scaling the sums and the counts of a client by
    the same factor keeps its ratio (no clipping bias in the means).

    The sums are those of :math:`W_j = 2^{-e_j}X_j` (:func:`_scaled_clients`:
    no square under- or overflows, review RC-08). A computed sum errs by at
    most :math:`\gamma_{n_j}\sum_i |w_{ia}|` (cancellation allowed), so
    :math:`M_j/2^{e_j}` by at most :math:`\gamma_{n_j}\sum_i\|w_i\| \le
    1.01\,n_j^2\sqrt d\,u` in Frobenius norm (the subnormal roundings add
    less); the norm of the computed sums (:math:`d` squares per cluster,
    :math:`k` clusters, a square root) adds :math:`(d + k + 3)u` relative.
    :math:`U_j = N_j(1 + 2u(d + k + 4)) + 2u\,n_j^2\sqrt d` (twice the
    margins: the other half covers this formula's rounding) bounds
    :math:`\|M_j\|_F/2^{e_j}`; a client with no rows or only zero rows (sums
    exactly 0) gets :math:`U_j = 0`.
    Both factors are those of :func:`_proven_clip_factors`.
    """
    sizes, n_features = shard.sizes, shard.X.shape[1]
    W, exponents, nonzero = _scaled_clients(shard)
    keys = shard.row_client * n_clusters + labels
    groups, inverse = np.unique(keys, return_inverse=True)
    indicator = sparse.csr_matrix((np.ones(len(W)), (inverse, np.arange(len(W)))),
                                  shape=(len(groups), len(W)))
    group_sums = indicator @ W
    squares = np.einsum("ij,ij->i", group_sums, group_sums)
    norms = np.sqrt(np.bincount(groups // n_clusters, weights=squares, minlength=len(sizes)))
    rows = sizes.astype(float)
    upper = (norms * (1.0 + 2.0 * _UNIT_ROUNDOFF * (n_features + n_clusters + 4))
             + 2.0 * _UNIT_ROUNDOFF * rows * rows * math.sqrt(n_features))
    upper[~nonzero] = 0.0
    return np.minimum(_proven_clip_factors(sum_bound, upper, exponents),
                      _count_clip_factors(sizes, count_bound))


def cluster_sums_statistic(shard, *, centers, components=None, bounds=None):
    r"""Step 3 of Algorithm 1 and every FedDP-Lloyds step: per-cluster sums and counts.

    Rows are assigned to the nearest of ``centers``: by projected distance
    :math:`\|V_k^\top x - \xi_r\|` when ``components`` is given (Step 3), by
    full distance otherwise (Algorithm 2). The sums are full-dimensional.
    A row's cluster is a function of the row alone
    (:func:`~skdpcluster.cluster._stable_init.nearest_centers`,
    :func:`~skdpcluster.cluster._stable_init.nearest_projected_centers`): a
    matrix product's rounding depends on the row's block, so under add/remove
    another row could change cluster (review R7).
    With ``bounds = (C_s, C_c)`` (client level), each client's sums and
    counts are scaled jointly (see :func:`_joint_clip_factors`).
    """
    X = shard.X
    labels = (nearest_centers(X, centers)[0] if components is None
              else nearest_projected_centers(X, components, centers))
    n_clusters = len(centers)
    if bounds is None:
        weights = np.ones(len(X))
    else:
        factors = _joint_clip_factors(shard, labels, n_clusters, *bounds)
        weights = np.repeat(factors, shard.sizes)
    assign = sparse.csr_matrix((weights, (labels, np.arange(len(X)))), shape=(n_clusters, len(X)))
    return assign @ X, np.bincount(labels, weights=weights, minlength=n_clusters)


# ---------------------------------------------------------------------------
# Server steps
# ---------------------------------------------------------------------------


def _noisy_means(executor, broadcast, *, releases, label, fallback, radius, rng, neighbouring):
    """One sums-and-counts round: noisy means, with low counts falling back (spec §2 step 11).

    ``releases`` is the (sums, counts) pair of :class:`Release`; ``fallback``
    the centres kept where the noisy count is below ``max(1, 3 b)``. Every
    centre is projected onto the ball, the fallback too (post-processing of
    released values; review R8 L2).
    """
    sums, counts = executor.reduce(cluster_sums_statistic, **broadcast)
    sum_release, count_release = releases
    noisy_sums, sum_event = _release(sums, sum_release, rng, f"{label}sums", neighbouring)
    noisy_counts, count_event = _release(counts, count_release, rng, f"{label}counts",
                                         neighbouring)
    trusted = noisy_counts >= max(1.0, LOW_COUNT_SCALES * count_release.scale)
    means = noisy_sums / np.maximum(noisy_counts, 1.0)[:, None]
    centers = _project_onto_ball(np.where(trusted[:, None], means, fallback), 0.0, radius)
    return centers, [sum_event, count_event], np.flatnonzero(~trusted)


def private_projection(executor, budget, n_components, n_features, bounds, rng, neighbouring):
    r"""Step 1: top-p eigenvectors :math:`V_k` of :math:`\widehat{PP^\top} = \sum_j A_j + E`.

    E is symmetric with i.i.d. :math:`N(0, \sigma_1^2)` entries on and above
    the diagonal (Analyze Gauss; paper App. B, Theorem 9): the upper triangle
    goes through the Gaussian mechanism with L2 sensitivity
    :math:`\Delta^2` (the corrected Step-1 sensitivity of spec §8.4-1,
    :math:`\|pp^\top\|_F = \|p\|^2`), or the client clip bound.
    """
    (moment,) = executor.reduce(second_moment_statistic, bound=bounds.get("projection"))
    upper = np.triu_indices(n_features)
    noisy, event = _release(moment[upper], budget.releases["projection"], rng, "projection",
                            neighbouring)
    symmetric = np.zeros((n_features, n_features))
    symmetric[upper] = noisy
    symmetric = symmetric + np.triu(symmetric, 1).T
    _, vectors = scipy.linalg.eigh(symmetric, subset_by_index=(n_features - n_components,
                                                               n_features - 1))
    return vectors[:, ::-1], event


def proxy_weights(noisy_weights, min_weight, n_clusters):
    """Server points kept for the weighted k-means and their weights (spec §2 step 7, §8.2).

    Points with noisy weight >= ``min_weight`` are kept. If fewer than
    ``n_clusters`` pass, the ``n_clusters`` heaviest are kept instead (ties by
    lowest index) and every weight is floored at :data:`WEIGHT_FLOOR`.
    """
    keep = noisy_weights >= min_weight
    if keep.sum() < n_clusters:
        keep = np.zeros(len(noisy_weights), dtype=bool)
        keep[np.argsort(-noisy_weights, kind="stable")[:n_clusters]] = True
    return keep, np.maximum(noisy_weights[keep], WEIGHT_FLOOR)


def _fit_centers(estimator, n_clusters, points, seed, sample_weight=None):
    """Fit a clone of the non-private clusterer on public points; its k centres."""
    model = clone(estimator)
    params = model.get_params(deep=False)
    model.set_params(**{k: v for k, v in (("n_clusters", n_clusters), ("random_state", seed))
                        if k in params})
    with single_threaded():  # a few hundred public points: threads only cost
        model.fit(points, sample_weight=sample_weight)
    centers = np.asarray(model.cluster_centers_, dtype=float)
    if centers.shape != (n_clusters, points.shape[1]):
        raise RuntimeError(f"{type(model).__name__} returned centres of shape {centers.shape}; "
                           f"expected {(n_clusters, points.shape[1])}.")
    return centers


def _seed(rng):
    return int(rng.integers(2**31 - 1))


def feddp_init(executor, server, *, n_clusters, budget, bounds, radius, min_weight, estimator,
               rng, neighbouring):
    r"""FedDP-Init (Algorithm 1 of the paper; spec §2): three rounds.

    Returns
    -------
    centers : ndarray of shape (n_clusters, n_features)
        :math:`\nu_r = \hat m_r / \max(\hat n_r, 1)` projected onto the data
        ball, or the lifted projected centre :math:`V_k\xi_r` where the noisy
        count is low.
    events : list of PrivacyEvent
    info : dict
        Private, already-paid-for intermediate releases.
    """
    n_features = server.shape[1]
    n_components = min(n_clusters, n_features)
    projection_rng, weight_rng, kmeans_rng, sums_rng = rng.spawn(4)
    events = []
    if "projection" in budget.releases:
        components, event = private_projection(executor, budget, n_components, n_features, bounds,
                                               projection_rng, neighbouring)
        events.append(event)
    else:  # k >= d: the subspace is the whole space, nothing to release
        components = np.eye(n_features)
    server_points = server @ components
    (histogram,) = executor.reduce(server_histogram_statistic, components=components,
                                   server_points=server_points, bound=bounds.get("weights"))
    noisy_weights, event = _release(histogram, budget.releases["weights"], weight_rng, "weights",
                                    neighbouring)
    events.append(event)
    keep, weights = proxy_weights(noisy_weights, min_weight, n_clusters)
    projected = _fit_centers(estimator, n_clusters, server_points[keep], _seed(kmeans_rng), weights)
    lifted = projected @ components.T
    centers, step_events, low = _noisy_means(
        executor, {"centers": projected, "components": components,
                   "bounds": _pair(bounds, "sums", "counts")},
        releases=(budget.releases["sums"], budget.releases["counts"]), label="",
        fallback=lifted, radius=radius, rng=sums_rng, neighbouring=neighbouring)
    info = {"components_": components.T if "projection" in budget.releases else None,
            "projected_centers_": projected, "server_weights_": noisy_weights,
            "server_mask_": keep, "init_low_count_": low}
    return centers, events + step_events, info


def _pair(bounds, sum_key, count_key):
    return None if not bounds else (bounds[sum_key], bounds[count_key])


def federated_lloyd(executor, centers, *, n_iter, budget, bounds, radius, rng, neighbouring):
    r"""FedDP-Lloyds (Algorithm 2 of the paper; spec §3): ``n_iter`` noisy Lloyd rounds.

    Each round assigns rows to the nearest centre in the full space and
    releases :math:`\hat m_r = \sum_j m_r^j + N(0, \sigma_4^2 I_d)` and
    :math:`\hat n_r = \sum_j n_r^j + \mathrm{Lap}(b_4)`; a centre with a low
    noisy count keeps its previous value.

    Returns
    -------
    centers, events, low_counts : ndarray, list of PrivacyEvent, list of ndarray
    """
    events, low_counts = [], []
    releases = (budget.releases.get("lloyd_sums"), budget.releases.get("lloyd_counts"))
    for step, step_rng in enumerate(rng.spawn(n_iter)):
        centers, step_events, low = _noisy_means(
            executor, {"centers": centers, "bounds": _pair(bounds, "lloyd_sums", "lloyd_counts")},
            releases=releases, label=f"lloyd_{step + 1}/", fallback=centers, radius=radius,
            rng=step_rng, neighbouring=neighbouring)
        events += step_events
        low_counts.append(low)
    return centers, events, low_counts


# ---------------------------------------------------------------------------
# Baseline initialisations (no client data, no budget)
# ---------------------------------------------------------------------------


def _uniform_ball(rng, n_points, n_features, radius):
    directions = rng.standard_normal((n_points, n_features))
    directions /= np.maximum(np.linalg.norm(directions, axis=1, keepdims=True), 1e-300)
    return directions * (radius * rng.random((n_points, 1)) ** (1.0 / n_features))


def _try_packing(n_clusters, n_features, radius, margin, rng, attempts):
    """k centres of B(0, radius - margin), pairwise >= 2 margin apart; None if ``attempts`` fail."""
    centers = np.empty((0, n_features))
    for _ in range(n_clusters):
        candidates = _uniform_ball(rng, attempts, n_features, radius - margin)
        if len(centers):
            gaps = np.linalg.norm(candidates[:, None, :] - centers[None], axis=-1).min(axis=1)
            candidates = candidates[gaps >= 2.0 * margin]
        if not len(candidates):
            return None
        centers = np.vstack([centers, candidates[:1]])
    return centers


def sphere_packing(n_clusters, n_features, radius, rng, *, attempts=1000, tol=1e-4):
    r"""SpherePacking (Su et al. 2017; the paper's App. G.3 baseline), data-independent.

    Binary search for the largest margin a such that k centres drawn
    uniformly from the ball :math:`B(0, \Delta - a)` can be placed pairwise
    at least 2a apart, allowing ``attempts`` draws per centre; returns the
    centres of the largest feasible a. Deviations from the paper (spec §5):
    the domain is the public data ball :math:`B(0, \Delta)` rather than the
    cube :math:`[-\Delta, \Delta]^d`, and the search continues to the largest
    feasible a instead of stopping at the first one.

    Returns
    -------
    centers : ndarray of shape (n_clusters, n_features)
    margin : float
    """
    best = _try_packing(n_clusters, n_features, radius, 0.0, rng, attempts)
    low, high = 0.0, radius
    while high - low > tol * radius:
        middle = 0.5 * (low + high)
        centers = _try_packing(n_clusters, n_features, radius, middle, rng, attempts)
        if centers is None:
            high = middle
        else:
            low, best = middle, centers
    return best, low


def baseline_init(name, server, *, n_clusters, n_features, radius, estimator, rng):
    """ServerKMeans++, ServerLloyds or SpherePacking (paper §5 "Baselines"): no client data."""
    if name == "server_kmeans++":
        centers, _ = kmeans_plusplus(server, n_clusters, random_state=_seed(rng))
    elif name == "server_lloyds":
        centers = _fit_centers(estimator, n_clusters, server, _seed(rng))
    else:
        centers, _ = sphere_packing(n_clusters, n_features, radius, rng)
    return _project_onto_ball(np.asarray(centers, dtype=float), 0.0, radius)
