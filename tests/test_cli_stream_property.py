"""Random small `dptree-opt stream` runs on the secure path (a counts file or standard input;
random mechanisms, options, horizons, budgets from 1e-300 to 1e300, bad lines): each is
either refused with no OpenDP draw, or leaves a JSON that holds every step it printed, with
a status that says whether the release is complete. A counts file is refused or complete;
only standard input (a line found bad or past the horizon once the stream runs) may end
incomplete."""

import contextlib
import io
import json
import math
import re
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dptree_opt.cli import main
from dptree_opt.stream import MECHANISMS

BAD_LINES = ["x", "-1", "1.5", "1e3", "9" * 2000, "9007199254740993", "1,2", '"', "nan"]


# the options each mechanism takes (anything else is refused before the noise)
_TREES = ("binary", "kary")
_BRANCHING = {"binary": [2], "kary": [2, 3, 5, 17], "negative_digits": [3, 5, 17],
              "tree_blue": [2, 3, 5, 17]}


@st.composite
def invocations(draw):
    """(lines, from standard input?, argv): three in four draws follow the rules of the
    mechanism drawn (so that most runs reach the noise), the others draw every flag
    freely."""
    n = draw(st.integers(0, 24))
    lines = [str(draw(st.integers(0, 30))) for _ in range(n)]
    if draw(st.booleans()) and n:
        lines.insert(draw(st.integers(0, n)), draw(st.sampled_from(BAD_LINES)))
    if draw(st.booleans()):
        lines.insert(0, "count")
    from_stdin = draw(st.booleans())
    mech = draw(st.sampled_from(MECHANISMS))
    horizons = [None, "unbounded", 1, 5, 12, 24, 40]
    if draw(st.integers(0, 3)):   # within the rules of the mechanism
        budget = draw(st.sampled_from([1.0, 0.05, 7.0, 1e-12, 1e12]))
        gaussian = mech in ("sqrt", "blt") or draw(st.booleans())
        argv = ["--mechanism", mech, "--rho" if gaussian else "--epsilon", repr(budget)]
        if mech in _BRANCHING and (mech == "kary" or draw(st.booleans())):
            argv += ["--branching", str(draw(st.sampled_from(_BRANCHING[mech])))]
        if mech in _TREES and draw(st.booleans()):
            argv += ["--estimator", draw(st.sampled_from(["covering", "causal"]))]
        if mech not in _TREES:
            horizons.remove("unbounded")
        if from_stdin:
            horizons.remove(None)
        horizon = draw(st.sampled_from(horizons))
    else:                         # any flags, budgets from 1e-300 to 1e300
        budget = draw(st.sampled_from([1e-300, 1e-12, 0.05, 1.0, 7.0, 1e12, 1e300]))
        argv = ["--mechanism", mech, draw(st.sampled_from(["--epsilon", "--rho"])),
                repr(budget)]
        for flag, values in [("--branching", [2, 3, 5, 17]),
                             ("--estimator", ["covering", "causal"])]:
            if draw(st.booleans()):
                argv += [flag, str(draw(st.sampled_from(values)))]
        horizon = draw(st.sampled_from([0, *horizons]))
    if horizon == "unbounded":
        argv += ["--unbounded"]
    elif horizon is not None:
        argv += ["--horizon", str(horizon)]
    return lines, from_stdin, argv


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=invocations())
def test_refused_without_draws_or_every_printed_step_on_disk(monkeypatch, opendp_calls, case):
    lines, from_stdin, argv = case
    tmp = Path(tempfile.mkdtemp())
    try:
        out = tmp / "run.json"
        text = "\n".join(lines) + ("\n" if lines else "")
        if from_stdin:
            monkeypatch.setattr("sys.stdin", io.StringIO(text))
            source = ["--counts", "-"]
        else:
            (tmp / "c.txt").write_text(text)
            source = ["--counts", str(tmp / "c.txt")]
        before = opendp_calls.count("drawn")
        stdout, stderr = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            code = main(["stream", *source, *argv, "--out", str(out)])
        drawn = opendp_calls.count("drawn") - before
        err = stderr.getvalue()
        assert "Traceback" not in err
        if not out.exists():   # refused: before any noise, with a message
            assert code == 2 and err.startswith("dptree-opt: error: ") and drawn == 0, err
            return
        doc = json.loads(out.read_text())
        rows = [r for r in stdout.getvalue().splitlines() if r and not r.startswith("#")]
        printed = [r.split(",") for r in rows[1:]]
        assert doc["steps"] == len(printed) == len(doc["estimate"])
        for i, (step, est, se) in enumerate(printed):
            e, s = doc["estimate"][i], doc["standard_error"][i]
            assert int(step) == i + 1
            assert f"{math.nan if e is None else e:.10g}" == est
            assert f"{math.inf if s is None else s:.6g}" == se
        if code == 0:
            assert doc["status"] == "complete" and doc["stopped"] is None
        else:
            assert code == 2 and doc["status"] == "incomplete" and doc["stopped"], err
            assert "INCOMPLETE" in err
            # only what cannot be known before the noise stops a stream: a line of standard
            # input (bad, or past the horizon), or standard input without any count; a counts
            # file is validated in full first (refused above, or complete)
            assert from_stdin, doc["stopped"]
            assert re.match(r"standard input: (line \d+ |no counts)", doc["stopped"]), doc
        if doc["status"] == "complete" and doc["account"]["horizon"] is not None:
            assert doc["steps"] <= doc["account"]["horizon"]
    finally:
        shutil.rmtree(tmp)


@pytest.mark.slow
@settings(max_examples=600, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=invocations())
def test_refused_or_complete_many(monkeypatch, opendp_calls, case):
    test_refused_without_draws_or_every_printed_step_on_disk.hypothesis.inner_test(
        monkeypatch, opendp_calls, case)
