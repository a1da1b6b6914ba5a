"""`dptree-opt engines`: the capability table is generated from the registry, and the docs page
docs/engines.md is that output (never hand-kept)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dptree_opt import engines
from dptree_opt.cli.engines_cmd import render_markdown, table_rows

DOCS = Path(__file__).resolve().parents[1] / "docs" / "engines.md"


def _cli(*args):
    code = "import sys; from dptree_opt.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, "engines", *args],
                          capture_output=True, text=True, timeout=60)


def test_docs_page_is_the_generated_table():
    assert DOCS.read_text() == render_markdown(table_rows()), (
        "docs/engines.md is stale: regenerate it with "
        "`dptree-opt engines --format markdown > docs/engines.md`")


def test_every_registered_engine_and_capability_is_listed():
    rows = table_rows()
    declared = [(e.name, c.task, c.estimator, ", ".join(c.kinds), c.cost)
                for e in engines.registered() for c in e.capabilities]
    assert [(r["engine"], r["task"], r["estimator"], r["workloads"], r["cost"])
            for r in rows] == declared
    assert engines.registered()[-1].name == "dense"   # the fallback is asked last
    assert {r["engine"] for r in rows} == {e.name for e in engines.registered()}


def test_cli_formats_and_filters():
    proc = _cli("--format", "json", "--task", "per_query", "--estimator", "causal")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert rows and all(r["task"] == "per_query" and r["estimator"] == "causal" for r in rows)
    assert rows == table_rows("per_query", "causal")
    text = _cli()
    assert text.returncode == 0 and "structures:" in text.stdout
    for e in engines.registered():
        assert f"  {e.name}: {e.structure}" in text.stdout


@pytest.mark.parametrize("args", [("--task", "fit"), ("--estimator", "ols"), ("--format", "x")])
def test_cli_refuses_unknown_choices(args):
    proc = _cli(*args)
    assert proc.returncode == 2 and "invalid choice" in proc.stderr
