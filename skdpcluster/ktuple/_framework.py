r"""The framework shared by PrivatekAverages and PrivatekNoisyCenters (Claim 4.6).

Both algorithms run PrivateTestPartition at ``(eps/2, delta/4, beta/2)`` and,
on success, an algorithm A* that is ``(eps/2, delta/4)``-indistinguishable on
every pair of neighbours with balls that ell-nearly partition them. Claim 4.6
then gives ``(eps, delta)`` in total: ``eps/2`` for Status, ``(eps/2, delta/4)``
for A*, and ``3 delta/4`` for conditioning on the event E of Claim 4.5 (the
selected balls ell-nearly partition the tuples; :func:`conditioning_event`).

The conditioning charge needs Claim 4.5 in the *unconditional* form that the
corrected ell gives (``spec/cohen_ktuple_review.md``, finding 3): for every
set of tuples, :math:`\Pr[S \wedge \neg E] \le m e^{\varepsilon_1}\,q/(1-q)\,\Pr[S]
= (\delta_{TP}/2)\Pr[S]` (S: Status is Success, :math:`\delta_{TP} = \delta/4`),
plus :math:`\delta_{TP}^2/2` for a success with no passing tuple. Then, with
:math:`\Pr_T[S] \le \min(1, e^{\varepsilon/2}\Pr_{T'}[S])`, conditioning
costs at most :math:`\delta_{TP}/2` on each side, an additive total of
:math:`\delta/4 + \delta_{TP} + O(\delta_{TP}^2) \le \delta` at every epsilon.
The paper's conditional form ("if :math:`\Pr[S] \ge \delta_{TP}` then
:math:`\Pr[\neg E \mid S] \le \delta_{TP}`") does not suffice: when
:math:`\Pr_{T'}[S] < \delta_{TP} \le \Pr_T[S]` it leaves an excess up to
:math:`e^{\varepsilon/2}\delta_{TP}`, above ``3 delta/4`` once
:math:`\varepsilon > 2\ln 3` (audit RE, ``re_10``).
"""

import math
from dataclasses import dataclass, field

import numpy as np

from skdpcluster.exceptions import InsufficientDataError
from skdpcluster.ktuple.partition import (
    _check_accounting,
    _outer_ell,
    min_tuples,
    private_test_partition,
)
from skdpcluster.mechanisms import PrivacyEvent
from skdpcluster.utils._progress import phase
from skdpcluster.utils._validation import check_epsilon_delta, check_probability

__all__ = [
    "KTupleResult",
    "canonical_order",
    "check_tuple_parameters",
    "clamp_to_float_range",
    "conditioning_event",
    "run_partition_test",
]


@dataclass
class KTupleResult:
    """What a k-tuple algorithm releases, and what it spent.

    Attributes
    ----------
    centers : ndarray of shape (k, d) or None
        The private centres in canonical row order; ``None`` when the private
        test failed.
    success : bool
        The private Status bit.
    events : list of PrivacyEvent
        Every release and theorem-level cost; their basic-composition sum is
        the guarantee.
    public : dict
        Public diagnostics (``n_tuples``, ``m``, ``eps1``, ``ell``, ``separation``).
    proven : bool
        False in reproduction modes whose privacy is not proven.
    """

    centers: np.ndarray | None
    success: bool
    events: list
    public: dict = field(default_factory=dict)
    proven: bool = True

    def privacy_spent(self):
        """Basic composition of the events: ``(epsilon, delta)``."""
        epsilon = math.fsum(event.cost()[0] for event in self.events)
        delta = math.fsum(event.cost()[1] for event in self.events)
        return epsilon, delta


def canonical_order(centers):
    """Sort the rows lexicographically: the released set is unordered (spec §0, finding 2)."""
    return centers[np.lexsort(centers.T[::-1])]


#: The largest float: released centres beyond it are clamped to it (post-processing).
FLOAT_MAX = float(np.finfo(float).max)


def nearest_gaps(centers):
    """Distance from every centre to its nearest other centre, at most the largest float.

    Each difference is scaled by a power of two near its largest coordinate
    (exact) before its norm, so no square overflows or underflows:
    ``np.linalg.norm`` made every gap above about 1.3e154 infinite, and the
    refinement's clipping radius with it (review R6-L2), and squared gaps
    between about 1.6e-162 and 1.5e-154 are subnormal, which quantised the
    log gaps of the noisy-centres method far beyond their sensitivity
    (review R10 L1). A gap beyond the float range (a difference that
    overflowed) is :data:`FLOAT_MAX`.
    """
    differences = centers[:, None, :] - centers[None, :, :]
    _, exponents = np.frexp(np.max(np.abs(differences), axis=-1))
    scales = np.ldexp(1.0, exponents - 1)[..., None]  # finite, and > 0 for every float
    gaps = np.minimum(np.linalg.norm(differences / scales, axis=-1) * scales[..., 0], FLOAT_MAX)
    np.fill_diagonal(gaps, np.inf)
    return gaps.min(axis=1)


def clamp_to_float_range(values):
    """``values`` clamped to [-:data:`FLOAT_MAX`, :data:`FLOAT_MAX`]: an overflow becomes finite.

    Post-processing of released values. Every row lies in that range, so the
    clamp moves no released centre away from any row.
    """
    return np.clip(values, -FLOAT_MAX, FLOAT_MAX)


def check_tuple_parameters(tuples, epsilon, delta, beta, separation, accounting):
    """Validate public parameters and the array of tuples; raise before any randomness.

    Raises
    ------
    ValueError
        For a bad shape, non-finite values, ``k < 2``, a bad privacy parameter,
        ``separation <= 6`` or an unknown ``accounting``.
    InsufficientDataError
        If there are fewer tuples than :func:`~skdpcluster.ktuple.min_tuples`.
    """
    if tuples.ndim != 3:
        raise ValueError(f"tuples must have shape (n_tuples, k, d), got shape {tuples.shape}.")
    n, k, _ = tuples.shape
    if k < 2:
        raise ValueError(f"k-tuple clustering needs k >= 2 centres per tuple, got k={k}.")
    if not np.all(np.isfinite(tuples)):
        raise ValueError("tuples contain NaN or infinite values.")
    check_epsilon_delta(epsilon, delta, allow_zero_delta=False)
    check_probability(beta, "beta")
    _check_accounting(accounting)
    if not (np.isfinite(separation) and separation > 6):
        raise ValueError(f"separation (Delta) must be a finite number > 6, got {separation!r}.")
    try:
        admissible = n >= 2 * _outer_ell(n, epsilon, delta, beta, accounting) + 2
    except InsufficientDataError:
        admissible = False
    if not admissible:
        needed = min_tuples(epsilon, delta, beta, accounting)
        raise InsufficientDataError(
            f"{n} tuples are too few for (epsilon={epsilon}, delta={delta}, beta={beta}) with "
            f"accounting={accounting!r}: at least {needed} are needed. Use more data, fewer "
            "rows per tuple, or a larger epsilon/delta."
        )


def run_partition_test(tuples, *, epsilon, delta, beta, separation, accounting, rng):
    """PrivateTestPartition at ``(eps/2, delta/4, beta/2)`` plus the public diagnostics."""
    n = tuples.shape[0]
    phase("private test (PrivateTestPartition)", tuples=n)
    test = private_test_partition(
        tuples, epsilon=epsilon / 2, delta=delta / 4, beta=beta / 2, separation=separation, rng=rng
    )
    phase("aggregation")
    public = {
        "n_tuples": n,
        "m": test.m,
        "eps1": test.eps1,
        "ell": _outer_ell(n, epsilon, delta, beta, accounting),
        "separation": float(separation),
        "accounting": accounting,
    }
    return test, test.events, public


def conditioning_event(delta, public, accounting):
    r"""The delta that Claim 4.6 spends on conditioning on the event of Claim 4.5.

    With ``accounting="corrected"`` Claim 4.5 holds at the test's
    :math:`\delta_{TP} = \delta/4` in the unconditional form
    :math:`\Pr[S \wedge \neg E] \le (\delta_{TP}/2)\Pr[S]` for every set of
    tuples (the module docstring gives the proof; the conditional form
    "if :math:`\Pr[S] \ge \delta_{TP}`" would not cover epsilon above
    :math:`2\ln 3`), and the framework spends :math:`3\delta/4`. With the paper's ell it is proven only at
    :math:`\delta_{TP}' = (1 + m e^{\varepsilon_1})\,\delta_{TP}/2` (review,
    finding 3); the event then charges :math:`3\delta_{TP}'` and, as the
    review's :math:`(\varepsilon + O(\delta'), O(\delta'))` form, adds that
    delta to epsilon too.
    """
    delta_tp = delta / 4
    if accounting == "paper":
        log_factor = float(np.logaddexp(0.0, math.log(public["m"]) + public["eps1"])) - math.log(2)
        delta_tp *= math.exp(min(log_factor, 700.0))  # beyond e^700 the bound is vacuous anyway
        epsilon = 3 * delta_tp
    else:
        epsilon = 0.0
    return PrivacyEvent(
        "ktuple_test_conditioning", epsilon, 3 * delta_tp, label="partition_test/conditioning",
        details={"claim": "Cohen et al. 2021, Claims 4.5 and 4.6", "accounting": accounting},
    )
