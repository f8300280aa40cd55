"""One text for the parameters (and attributes) the estimators share, filled into their docstrings.

A placeholder is a docstring line holding only ``{name}``: :func:`shared_params`
replaces it by ``_shared_params[name]``, every line indented like the
placeholder. An entry is either a whole numpydoc parameter (a ``name : type``
line and its description, for a placeholder at the parameter's indentation) or
a fragment of a description (for a placeholder inside one). Only lines that
are exactly a known placeholder are replaced, so LaTeX braces and other text
pass through unchanged. Each estimator's file keeps only the text that differs
(the same idea as scikit-learn's shared ``_param_validation`` texts and
pandas' ``Substitution``).
"""

import re

_shared_params = {
    "n_clusters": """\
n_clusters : int, default=8
    Number of clusters k (>= 1). ``n_clusters=1`` releases a private mean
    (k-median: a private 1-median) of the rows in the bound's ball through
    :mod:`skdpcluster.averaging`, on the whole budget
    (:mod:`skdpcluster.cluster._one_cluster`; ``status_="success"``). On
    Dask input the private mean needs the rows in memory: the stable k-means
    estimators then run their k-cluster path with k = 1, the high-dim one
    refuses before spending (the 1-median runs pass by pass).""",
    "epsilon": """\
epsilon : float, default=1.0
    Privacy parameter of the whole fit, > 0.""",
    "delta": """\
delta : float, default=1e-6
    Privacy parameter of the whole fit, in (0, 1).""",
    # A fragment of the ``data_radius`` description.
    "private_bound": """\
``None`` (the default) releases a centre and a radius privately on 10%
of (epsilon, delta) (:mod:`skdpcluster.bounds`), stored in
``data_center_`` and ``data_radius_``; ``"data"`` computes the exact
bound from the data (not private, with a
:class:`~skdpcluster.exceptions.PrivacyLeakWarning`).""",
    # An entry of the Attributes sections of the estimators with a private bound.
    "data_center_": """\
data_center_ : ndarray of shape (n_features,) or None
    The centre of the bound: released when ``data_radius=None`` released
    it (private; under replace-one, where the number of rows is public, the
    origin when they were too few to locate it; under add/remove always a
    released centre), else the public ``data_center`` (the origin when it
    is ``None``). ``None`` after a fit whose private step failed
    (``"private_step_failed"`` in ``privacy_ledger_``), first fit or refit.""",
    "accountant": """\
accountant : BudgetAccountant, default=None
    Charged once per fit with ``privacy_spent_``; ``None`` uses the
    default one.""",
    "random_state": """\
random_state : None, int or numpy.random.Generator, default=None
    ``None`` draws fresh OS entropy; an int or a Generator makes the fit
    reproducible.""",
    "verbose": """\
verbose : int, default=0
    When > 0, print the public plan and report the phases of the fit
    (bound estimation, tuple generation with the blocks done, test,
    aggregation, refinement, ...) and their timings to the
    ``"skdpcluster"`` logger, or to stderr when logging does not show
    INFO messages. Public counts and times only, never a data value.""",
}

_PLACEHOLDER = re.compile(r"^(?P<indent>[ \t]*)\{(?P<name>\w+)\}[ \t]*$", re.MULTILINE)


def fill_shared_params(doc):
    """``doc`` with every line ``{name}`` of :data:`_shared_params` replaced, indented alike."""

    def replace(match):
        name = match["name"]
        if name not in _shared_params:
            return match[0]
        return "\n".join(match["indent"] + line if line else line
                         for line in _shared_params[name].splitlines())

    return _PLACEHOLDER.sub(replace, doc)


def shared_params(obj):
    """Class or function decorator: fill the shared parameter texts into ``obj.__doc__``."""
    obj.__doc__ = fill_shared_params(obj.__doc__)
    return obj
