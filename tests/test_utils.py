import numpy as np
import pytest

from skdpcluster.utils import check_epsilon_delta, check_probability, check_random_state, spawn_generators


def test_none_is_fresh_entropy_not_the_global_generator():
    np.random.seed(0)
    first = check_random_state(None).random(4)
    np.random.seed(0)
    second = check_random_state(None).random(4)
    assert not np.array_equal(first, second)


def test_int_and_generator_seeds():
    assert np.array_equal(check_random_state(3).random(5), check_random_state(3).random(5))
    rng = np.random.default_rng(1)
    assert check_random_state(rng) is rng
    assert isinstance(check_random_state(np.random.SeedSequence(2)), np.random.Generator)


@pytest.mark.parametrize("bad", [np.random.RandomState(0), 1.5, "seed", True])
def test_bad_seeds_are_refused(bad):
    with pytest.raises(ValueError, match="random_state"):
        check_random_state(bad)


def test_spawned_children_are_independent_and_reproducible():
    a = [g.random() for g in spawn_generators(np.random.default_rng(5), 3)]
    b = [g.random() for g in spawn_generators(np.random.default_rng(5), 3)]
    assert a == b and len(set(a)) == 3


@pytest.mark.parametrize(
    "epsilon, delta, match",
    [(0, 1e-6, "epsilon"), (-1, 1e-6, "epsilon"), (float("inf"), 1e-6, "epsilon"),
     ("1", 1e-6, "epsilon"), (1, 1, "delta"), (1, -1e-9, "delta"), (1, float("nan"), "delta")],
)
def test_privacy_parameter_errors_name_the_parameter(epsilon, delta, match):
    with pytest.raises(ValueError, match=match):
        check_epsilon_delta(epsilon, delta)


def test_probability_range():
    assert check_probability(0.05, "beta") == 0.05
    with pytest.raises(ValueError, match="beta"):
        check_probability(1.0, "beta")
    assert check_probability(1.0, "beta", closed_right=True) == 1.0


# -- progress of long fits (verbose) -------------------------------------------------

#: A value no public count or time of these fits can print.
DISTINCTIVE = 4242.4242


def _distinctive_data():
    """A separated mixture moved by DISTINCTIVE, with one row exactly at it (a data value)."""
    from skdpcluster.datasets import make_separated_mixture

    X, _ = make_separated_mixture(20_000, n_clusters=4, n_features=2, separation=10,
                                  random_state=0)
    X = X + DISTINCTIVE
    X[0] = DISTINCTIVE
    return X


@pytest.mark.parametrize("estimator, phases", [
    ("ktuple", ["bound estimation", "tuple generation", "blocks (100%)", "location",
                "refinement on the rows"]),
    ("ktuple_paper", ["tuple generation", "private test", "aggregation"]),
    ("stable", ["bound estimation", "initializer", "refinement", "selection"]),
])
def test_verbose_fit_reports_its_phases_and_no_data_value(estimator, phases, capsys):
    import warnings

    from skdpcluster import BudgetAccountant, KTupleClusterer, PrivateStableKMeans

    make = {
        "ktuple": lambda: KTupleClusterer(4, n_tuples=1000),
        "ktuple_paper": lambda: KTupleClusterer(4, method="noisy_centers"),
        "stable": lambda: PrivateStableKMeans(4),
    }[estimator]
    X = _distinctive_data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # utility and separation warnings are not the point
        make().set_params(verbose=1, accountant=BudgetAccountant(), random_state=0).fit(X)
    captured = capsys.readouterr()
    report = captured.err
    for name in ["fit started", *phases, "fit done in"]:
        assert name in report, report
    everything = captured.out + captured.err
    for text in ("4242", "4,242", "4.24e+03", "4.2e+03"):
        assert text not in everything


def test_quiet_fit_reports_nothing(capsys):
    from skdpcluster import BudgetAccountant, PrivateStableKMeans

    PrivateStableKMeans(4, data_radius=20.0, accountant=BudgetAccountant(),
                        random_state=0).fit(_distinctive_data() - DISTINCTIVE)
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out == ""


def test_progress_goes_to_the_skdpcluster_logger_when_logging_shows_it(caplog, capsys):
    import logging

    from skdpcluster import BudgetAccountant, PrivateStableKMeans

    with caplog.at_level(logging.INFO, logger="skdpcluster"):
        PrivateStableKMeans(4, data_radius=20.0, verbose=1, accountant=BudgetAccountant(),
                            random_state=0).fit(_distinctive_data() - DISTINCTIVE)
    messages = [r.getMessage() for r in caplog.records if r.name == "skdpcluster"]
    assert any("selection: done in" in m for m in messages)
    assert "[PrivateStableKMeans] fit started" not in capsys.readouterr().err


@pytest.mark.parametrize("bad", [1.5, np.float64(DISTINCTIVE), np.zeros(2), True])
def test_progress_messages_refuse_anything_but_counts_and_names(bad):
    from skdpcluster.utils._progress import advance, fit_progress, phase

    class Verbose:
        verbose = 1

    with fit_progress(Verbose()):
        with pytest.raises(TypeError, match="public counts"):
            phase("test", value=bad)
        with pytest.raises(TypeError, match="public counts"):
            advance(bad, 10, "blocks")


# -- shared parameter texts of the estimators' docstrings ----------------------------


def test_shared_params_fill_placeholder_lines_only():
    from skdpcluster.utils._docstrings import fill_shared_params

    doc = "Title.\n\n    Parameters\n    ----------\n    {delta}\n    x : float\n        B(\\mathrm{data\\_center}) {delta} {unknown}\n        {private_bound}\n    {unknown}\n"
    filled = fill_shared_params(doc)
    assert "    delta : float, default=1e-6\n        Privacy parameter of the whole fit" in filled
    assert "        ``None`` (the default) releases a centre" in filled
    assert "B(\\mathrm{data\\_center}) {delta} {unknown}" in filled  # not a placeholder line
    assert "    {unknown}\n" in filled


@pytest.mark.parametrize("name", ["PrivateStableKMeans", "PrivateStableKMedian", "KTupleClusterer",
                                  "PrivateHighDimKMeans", "PrivateHighDimKMedian",
                                  "PrivateGaussianMixture"])
def test_every_parameter_is_documented_once_and_no_placeholder_is_left(name):
    import inspect
    import re

    import skdpcluster

    estimator = getattr(skdpcluster, name)
    doc = inspect.getdoc(estimator)
    assert not re.search(r"^\s*\{\w+\}\s*$", doc, re.MULTILINE)
    section = doc.split("\nParameters\n----------\n")[1].split("\nAttributes\n")[0]
    documented = [name.strip() for line in section.splitlines()
                  if re.match(r"^\w[\w, ]* : ", line) for name in line.split(" : ")[0].split(",")]
    expected = list(inspect.signature(estimator).parameters)
    assert sorted(documented) == sorted(expected)


@pytest.mark.parametrize("name", ["PrivateStableKMeans", "PrivateStableKMedian", "KTupleClusterer",
                                  "PrivateHighDimKMeans", "PrivateHighDimKMedian",
                                  "PrivateGaussianMixture", "FederatedPrivateKMeans",
                                  "SampleAggregateStableKMeans", "local.LocalPrivateStableKMeans",
                                  "preprocessing.PrivateStandardScaler"])
def test_data_center_is_documented_with_its_none_after_a_failed_step(name):
    """Review R9 L3: every estimator sets ``data_center_``, ``None`` after a failed private step,
    but LocalPrivateStableKMeans, SampleAggregateStableKMeans and PrivateGaussianMixture did not
    document it as an attribute, and no docstring said it could be None."""
    import importlib
    import inspect
    import re

    module, _, cls = f"skdpcluster.{name}".rpartition(".")
    doc = inspect.getdoc(getattr(importlib.import_module(module), cls))
    attributes = doc.split("\nAttributes\n----------\n")[1]
    entry = re.search(r"^data_center_ : (.*)\n((?:    .*\n)+)", attributes, re.MULTILINE)
    assert entry is not None, f"{name} does not document data_center_"
    assert entry[1] == "ndarray of shape (n_features,) or None"
    assert "``None`` after a fit whose private step failed" in " ".join(entry[2].split())
