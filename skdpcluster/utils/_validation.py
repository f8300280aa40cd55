"""Checks of privacy parameters, raising errors that name the parameter and the fix."""

import math
from numbers import Real

__all__ = ["check_epsilon_delta", "check_probability"]


def _check_real(value, name):
    if isinstance(value, bool) or not isinstance(value, Real) or math.isnan(value):
        raise ValueError(f"{name} must be a real number, got {name}={value!r}.")
    return float(value)


def check_epsilon_delta(epsilon, delta, *, allow_zero_delta=True, allow_infinite_epsilon=False):
    """Validate a privacy budget ``(epsilon, delta)``.

    Parameters
    ----------
    epsilon : float
        Must be > 0 (and finite unless ``allow_infinite_epsilon``).
    delta : float
        Must lie in [0, 1) (or (0, 1) when ``allow_zero_delta`` is False).

    Returns
    -------
    (float, float)

    Raises
    ------
    ValueError
        Naming the parameter, the value and the admissible range.
    """
    epsilon = _check_real(epsilon, "epsilon")
    delta = _check_real(delta, "delta")
    if not epsilon > 0 or (math.isinf(epsilon) and not allow_infinite_epsilon):
        raise ValueError(
            f"epsilon must be a finite number > 0, got epsilon={epsilon!r}; "
            "smaller epsilon means more privacy (typical values 0.1 to 4)."
        )
    low_ok = delta >= 0 if allow_zero_delta else delta > 0
    if not (low_ok and delta < 1):
        interval = "[0, 1)" if allow_zero_delta else "(0, 1)"
        raise ValueError(
            f"delta must lie in {interval}, got delta={delta!r}; "
            "use a value well below 1/n_samples, such as 1e-6."
        )
    return epsilon, delta


def check_probability(value, name, *, closed_right=False):
    """Validate a probability parameter (such as ``beta``) in (0, 1) or (0, 1].

    Returns
    -------
    float
    """
    value = _check_real(value, name)
    high_ok = value <= 1 if closed_right else value < 1
    if not (value > 0 and high_ok):
        interval = "(0, 1]" if closed_right else "(0, 1)"
        raise ValueError(f"{name} must lie in {interval}, got {name}={value!r}.")
    return value
