"""`dptree-opt experiment NAME --set NAME=VALUE`: parameters from the command line, parsed by
the type each experiment declares; unknown names refused with the valid ones; `--help` with a
NAME lists them."""

from __future__ import annotations

import csv

import pytest

from dptree_opt.cli import main
from dptree_opt.cli._scripts import list_scripts, load_script
from dptree_opt.cli.experiment_cmd import TYPES, apply_settings, parameters


@pytest.mark.parametrize("stem", list_scripts("experiments"))
def test_every_experiment_declares_its_parameters(stem):
    module = load_script("experiments", stem)
    params = parameters(module)
    assert params, f"{stem} declares no PARAMETERS"
    for name, spec in params.items():
        assert spec["type"] in TYPES and spec.get("help")
        for const in spec["sets"]:
            default = getattr(module, const)       # every constant it sets exists
            if spec["type"] in ("ints", "floats", "strs"):
                assert isinstance(default, tuple), (stem, name, const)
            else:
                assert not isinstance(default, (tuple, list)), (stem, name, const)


def test_k_sweep_runs_with_the_settings(tmp_path, capsys):
    """K, k, epsilon and neighbours set from the command line are the ones the table holds;
    the experiment's own checks (closed forms, Gauss-Markov) pass at those settings."""
    assert main(["experiment", "k_sweep", "--set", "K=256", "--set", "k=2,4,16",
                 "--set", "epsilon=2", "--set", "neighbours=swap", "--out",
                 str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert '"epsilon": 2.0' in out
    rows = list(csv.DictReader((tmp_path / "k_sweep.csv").open()))
    assert {r["n_bins"] for r in rows} == {"256"}
    assert [int(r["k"]) for r in rows] == [2, 4, 16]
    assert {r["neighbours"] for r in rows} == {"swap"}


def test_values_are_parsed_by_type():
    module = load_script("experiments", "k_sweep")
    got = apply_settings(module, ["K=65536", "epsilon=1", "k=3, 5"])
    assert got == {"K": (65536,), "epsilon": 1.0, "k": (3, 5)}
    assert module.BINS == (65536,) and module.EPSILON == 1.0
    assert module.KS == module.QUICK_KS == (3, 5)
    fresh = load_script("experiments", "k_sweep")     # a new load: the defaults again
    assert fresh.BINS == (2**12, 2**20)


@pytest.mark.parametrize("setting, message", [
    ("KK=3", "unknown parameter 'KK'; valid: K, epsilon, k, neighbours"),
    ("K=abc", "--set K: 'abc' is not an integer"),
    ("K=", "give 1 to"),
    ("K=1,,2", "give 1 to"),
    ("epsilon=-1", "--set epsilon must be"),
    ("epsilon=nan", "--set epsilon must be"),
    ("k=1", "--set k must be"),
    ("neighbours=both", "'both' is not one of swap, add_remove"),
    ("K", "--set takes NAME=VALUE"),
])
def test_bad_settings_are_refused(tmp_path, capsys, setting, message):
    assert main(["experiment", "k_sweep", "--set", setting, "--out", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "k_sweep.csv").exists()


def test_help_lists_the_parameters(capsys):
    assert main(["experiment", "k_sweep", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--set NAME=VALUE" in out
    for name in ("K", "k", "epsilon", "neighbours"):
        assert f"\n  {name} " in out
    assert "(default: 4096,1048576)" in out
