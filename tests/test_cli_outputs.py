"""The files the command line writes, its front door and its standard output.

* ``compare --plot``, ``figures --out``, ``experiment --out`` (and the scripts run on their
  own) check their output paths BEFORE any work, refuse to overwrite without ``--force``, and
  write every file atomically (``dptree_opt.cli._common.output_file`` / ``output_dir``,
  ``dptree_opt.plotting.save_figure``);
* standard output closed early (``| head``): no traceback, exit status 141; ``stream``
  carries on and writes its ``--out``;
* negative numbers and lists as option values (the README's grid example).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import stat
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from dptree_opt import plotting
from dptree_opt.cli import build_parser, main
from dptree_opt.cli import experiment_cmd, figures_cmd
from dptree_opt.cli._common import output_dir, output_file
from dptree_opt.cli._scripts import REPO_ROOT, list_scripts, load_script, script_outputs

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
COMPARE = ["compare", "--bins", "16", "--epsilon", "1", "--opendp-trials", "0",
           "--workloads", "cdf"]


def run(*argv):
    """(exit status, stdout, stderr) of ``main(argv)`` in process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def leftovers(folder: Path) -> list[str]:
    """Temporary files an atomic write would leave behind if it failed half-way."""
    return [p.name for p in folder.iterdir() if p.name.startswith(".")]


@pytest.fixture
def no_compare(monkeypatch):
    """The comparison itself: any call fails the test (a refusal must come first)."""
    import dptree_opt.compare as cmp

    def boom(*a, **k):
        raise AssertionError("the comparison ran before --plot was checked")
    monkeypatch.setattr(cmp, "compare", boom)


@pytest.fixture
def no_scripts(monkeypatch):
    """figures / experiment: loading a script fails the test (refusals come first)."""
    def boom(*a, **k):
        raise AssertionError("a script was loaded before --out was checked")
    monkeypatch.setattr(figures_cmd, "load_script", boom)
    monkeypatch.setattr(experiment_cmd, "load_script", boom)


def fake_scripts(monkeypatch, calls: list):
    """figures / experiment run a stand-in script that records its out_dir (no real work)."""
    def load(folder, stem):
        def run_(out_dir, quick=True):
            calls.append((stem, Path(out_dir)))
            return {"name": stem, "png": str(Path(out_dir) / f"{stem}.png"), "checks": []}
        return types.SimpleNamespace(run=run_)
    monkeypatch.setattr(figures_cmd, "load_script", load)
    monkeypatch.setattr(experiment_cmd, "load_script", load)


# ------------------------------------------------------------------ compare --plot
def test_compare_plot_existing_file_is_refused_before_the_comparison(tmp_path, no_compare):
    png = tmp_path / "c.png"
    png.write_bytes(b"old")
    code, out, err = run(*COMPARE, "--plot", str(png))
    assert code == 2 and out == ""
    assert "--plot" in err and "exists" in err and "--force" in err
    assert png.read_bytes() == b"old"
    # an existing directory means DIR/compare_K16.png: that file is held to the same rule
    (tmp_path / "compare_K16.png").write_bytes(b"old")
    code, _, err = run(*COMPARE, "--plot", str(tmp_path))
    assert code == 2 and "compare_K16.png" in err and "--force" in err


@pytest.mark.parametrize("target, needle", [
    ("missing/c.png", "does not exist"),
    ("c.txt", "name a .png / .pdf / .svg file"),
    ("c.v2", "name a .png / .pdf / .svg file"),
    ("", "expected a file name"),
    ("isdir", "is a directory"),  # isdir/compare_K16.png is one
    ("fifo.png", "not a regular file"),
    ("newdir/", "directory 'newdir/' does not exist"),  # not "newdir.png"
    ("a" * 300 + ".png", "File name too long"),
    ("loop/c.png", "does not exist"),  # loop -> loop
])
@pytest.mark.parametrize("force", [False, True])
def test_compare_plot_bad_paths_are_refused_before_the_comparison(tmp_path, no_compare,
                                                                  monkeypatch, target, needle,
                                                                  force):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "isdir" / "compare_K16.png").mkdir(parents=True)
    os.mkfifo(tmp_path / "fifo.png")
    os.symlink("loop", tmp_path / "loop")
    code, out, err = run(*COMPARE, "--plot", target, *(["--force"] if force else []))
    assert code == 2 and out == "", err
    assert err.startswith("dptree-opt: error: --plot") and needle in err


def test_compare_plot_unwritable_directory_is_refused_first(tmp_path, no_compare, monkeypatch):
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if Path(p) == tmp_path
                        else real(p, mode))
    code, _, err = run(*COMPARE, "--plot", str(tmp_path / "c.png"))
    assert code == 2 and "not writable" in err and "--plot" in err
    assert list(tmp_path.iterdir()) == []


def test_compare_plot_force_overwrites_atomically(tmp_path):
    png = tmp_path / "c.png"
    png.write_bytes(b"old")
    code, out, err = run(*COMPARE, "--plot", str(png), "--force")
    assert code == 0, err
    assert png.read_bytes().startswith(PNG_MAGIC) and f"plot written to {png}" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.png"]  # no temporary file left


def test_compare_plot_write_failure_keeps_the_table_and_the_old_file(tmp_path, monkeypatch):
    """A disk that fills up while the PNG is drawn: the old file is untouched, no partial
    file is left, the table is still printed, exit status 1."""
    import matplotlib.figure

    def half_written(self, fh, **kw):
        fh.write(b"partial")
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", half_written)
    png = tmp_path / "c.png"
    png.write_bytes(b"old")
    code, out, err = run(*COMPARE, "--plot", str(png), "--force")
    assert code == 1
    assert "could not write the plot" in err and "No space left" in err
    assert "histogram + BLUE" in out and "plot written" not in out
    assert png.read_bytes() == b"old" and leftovers(tmp_path) == []


def test_compare_plot_directory_removed_during_the_comparison(tmp_path, monkeypatch):
    """--plot was checked first, but its directory is gone when the comparison ends: the
    table is still printed (exit 1, the message names the plot), never a lost run."""
    import dptree_opt.compare as cmp
    real = cmp.compare
    where = tmp_path / "d"
    where.mkdir()

    def compare_then_remove(*a, **k):
        res = real(*a, **k)
        where.rmdir()
        return res
    monkeypatch.setattr(cmp, "compare", compare_then_remove)
    code, out, err = run(*COMPARE, "--plot", str(where / "c.png"))
    assert code == 1, err
    assert "could not write the plot" in err and "c.png" in err and "Traceback" not in err
    assert "histogram + BLUE" in out and "plot written" not in out


# ------------------------------------------------------------------ plotting.save_figure
def test_save_figure_is_atomic_and_never_clobbers_without_force(tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    target = tmp_path / "f.png"
    target.write_bytes(b"old")
    with pytest.raises(FileExistsError):
        plotting.save_figure(fig, target)
    assert target.read_bytes() == b"old" and leftovers(tmp_path) == []
    plotting.save_figure(fig, target, force=True)
    assert target.read_bytes().startswith(PNG_MAGIC)
    svg = plotting.save_figure(fig, tmp_path / "f.svg")  # the format follows the suffix
    assert b"<svg" in svg.read_bytes()[:400]
    plt.close(fig)
    assert leftovers(tmp_path) == []


def test_save_figure_permissions_are_those_open_would_give(tmp_path):
    """Not the 0600 of a temporary file: a new figure gets 0666 minus the umask, a replaced
    one keeps its permissions."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure()
    old = os.umask(0o027)
    try:
        path = plotting.save_figure(fig, tmp_path / "f.png")
        kept = tmp_path / "kept.png"
        kept.write_bytes(b"old")
        kept.chmod(0o604)
        plotting.save_figure(fig, kept, force=True)
    finally:
        os.umask(old)
        plt.close(fig)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~0o027
    assert stat.S_IMODE(kept.stat().st_mode) == 0o604 and kept.read_bytes() != b"old"


# ------------------------------------------------------------------ figures --out
@pytest.mark.parametrize("case, needle", [
    ("a_file", "exists and is not a directory"),
    ("missing_parent", "does not exist"),
    ("empty", "expected a directory path"),
    ("held", "already holds 2 files"),
    ("output_is_a_directory", "is a directory"),
    ("symlink_loop", "is a broken symbolic link"),
    ("too_long", "File name too long"),
])
def test_figures_out_is_checked_before_any_script_runs(tmp_path, no_scripts, case, needle):
    out = {"a_file": tmp_path / "f.txt", "missing_parent": tmp_path / "no" / "figs",
           "empty": "", "held": tmp_path, "output_is_a_directory": tmp_path,
           "symlink_loop": tmp_path / "loop", "too_long": tmp_path / ("b" * 300)}[case]
    (tmp_path / "f.txt").write_text("mine")
    os.symlink("loop", tmp_path / "loop")
    if case == "held":
        (tmp_path / "rts_psi.png").write_bytes(b"old")
        (tmp_path / "figures_summary.json").write_text("old")
    if case == "output_is_a_directory":
        (tmp_path / "rts_psi.json").mkdir()
    code, out_text, err = run("figures", "--quick", "--only", "rts_psi", "--out", str(out),
                              "--no-progress", *(["--force"] if case == "output_is_a_directory"
                                                 else []))
    assert code == 2 and out_text == "", err
    assert err.startswith("dptree-opt: error: --out") and needle in err
    if case == "held":
        assert "--force" in err and "rts_psi.png" in err and "figures_summary.json" in err
        assert (tmp_path / "rts_psi.png").read_bytes() == b"old"
    assert not (tmp_path / "no").exists()


def test_figures_out_unwritable_is_refused_first(tmp_path, no_scripts, monkeypatch):
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if Path(p) == tmp_path
                        else real(p, mode))
    code, _, err = run("figures", "--only", "rts_psi", "--out", str(tmp_path))
    assert code == 2 and "not writable" in err
    code, _, err = run("figures", "--only", "rts_psi", "--out", str(tmp_path / "new"))
    assert code == 2 and "cannot create" in err and not (tmp_path / "new").exists()


def test_figures_creates_a_missing_out_one_level(tmp_path, monkeypatch):
    calls = []
    fake_scripts(monkeypatch, calls)
    code, out, err = run("figures", "--only", "rts_psi", "--out", str(tmp_path / "new"),
                         "--no-progress")
    assert code == 0, err
    assert calls == [("rts_psi", tmp_path / "new")]
    assert (tmp_path / "new" / "figures_summary.json").is_file()


def test_figures_force_overwrites_its_own_files_only(tmp_path):
    (tmp_path / "rts_psi.png").write_bytes(b"old")
    (tmp_path / "notes.txt").write_text("mine")
    code, _, err = run("figures", "--quick", "--only", "rts_psi", "--out", str(tmp_path),
                       "--no-progress")
    assert code == 2 and (tmp_path / "rts_psi.png").read_bytes() == b"old"
    code, out, err = run("figures", "--quick", "--only", "rts_psi", "--out", str(tmp_path),
                         "--no-progress", "--force")
    assert code == 0, err
    assert (tmp_path / "rts_psi.png").read_bytes().startswith(PNG_MAGIC)
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "figures_summary.json", "notes.txt", "rts_psi.json", "rts_psi.png"]


def test_figures_summary_write_failure_is_reported_after_the_table(tmp_path, monkeypatch):
    calls = []
    fake_scripts(monkeypatch, calls)

    def full(*a, **k):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(figures_cmd, "write_text_atomic", full)
    code, out, err = run("figures", "--only", "rts_psi", "--out", str(tmp_path),
                         "--no-progress")
    assert code == 1 and calls
    assert "could not write" in err and "figures_summary.json" in err
    assert "checks passed" in out


def test_figures_out_removed_during_the_run_is_reported_after_the_table(tmp_path,
                                                                         monkeypatch):
    calls = []
    fake_scripts(monkeypatch, calls)
    out = tmp_path / "figs"
    real = figures_cmd.load_script

    def load_then_remove(folder, stem):
        out.rmdir()   # the scripts wrote nothing here (stand-ins)
        return real(folder, stem)
    monkeypatch.setattr(figures_cmd, "load_script", load_then_remove)
    code, text, err = run("figures", "--only", "rts_psi", "--out", str(out), "--no-progress")
    assert code == 1 and calls, err
    assert "could not write" in err and "figures_summary.json" in err
    assert "checks passed" in text and "Traceback" not in err


# ------------------------------------------------------------------ experiment --out
@pytest.mark.parametrize("case, needle", [
    ("a_file", "exists and is not a directory"),
    ("missing_parent", "does not exist"),
    ("held", "already holds 1 file this run writes (eps_split.csv)"),
])
def test_experiment_out_is_checked_before_the_run(tmp_path, monkeypatch, case, needle):
    calls = []
    fake_scripts(monkeypatch, calls)
    (tmp_path / "f.txt").write_text("mine")
    (tmp_path / "eps_split.csv").write_text("old")
    out = {"a_file": tmp_path / "f.txt", "missing_parent": tmp_path / "no" / "o",
           "held": tmp_path}[case]
    code, _, err = run("experiment", "eps_split", "--quick", "--out", str(out))
    assert code == 2 and calls == [], err
    assert err.startswith("dptree-opt: error: --out") and needle in err
    assert (tmp_path / "eps_split.csv").read_text() == "old"


def test_experiment_force_overwrites(tmp_path):
    (tmp_path / "eps_split.csv").write_text("old")
    code, _, err = run("experiment", "eps_split", "--quick", "--out", str(tmp_path), "--force")
    assert code == 0, err
    assert (tmp_path / "eps_split.csv").read_text().startswith("tree,")
    assert (tmp_path / "eps_split.png").read_bytes().startswith(PNG_MAGIC)
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("folder, stem, held", [("paper_figures", "rts_psi", "rts_psi.json"),
                                                ("experiments", "eps_split", "eps_split.png")])
def test_scripts_run_on_their_own_check_out_first(tmp_path, folder, stem, held):
    """`python paper_figures/NAME.py --out DIR` holds DIR to the same rule (exit 2)."""
    (tmp_path / held).write_text("old")
    proc = subprocess.run([sys.executable, str(REPO_ROOT / folder / f"{stem}.py"), "--out",
                           str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "--out" in proc.stderr and "--force" in proc.stderr and "Traceback" not in proc.stderr
    assert (tmp_path / held).read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == [held]


@pytest.mark.parametrize("folder", ["paper_figures", "experiments"])
def test_every_script_writes_only_files_named_after_it(folder):
    """The --out check knows a run's files by name (NAME.png / .json / .csv): each script
    is named after its file, and writes only through its folder's helpers (which name the
    files NAME.<suffix> and write atomically)."""
    helpers = "_figures" if folder == "paper_figures" else "_experiments"
    writers = re.compile(r"savefig\(|write_text\(|write_bytes\(|\bopen\(|np\.save|to_csv\(|"
                         r"json\.dump\(")
    for stem in list_scripts(folder):
        assert load_script(folder, stem).NAME == stem
        source = (REPO_ROOT / folder / f"{stem}.py").read_text()
        assert not writers.search(source), f"{folder}/{stem}.py writes a file itself"
        assert f"import {helpers} as C" in source
    assert script_outputs("x") == ["x.png", "x.json", "x.csv"]


def test_output_helpers_directly(tmp_path):
    assert output_file(tmp_path / "a.png", flag="--plot", suffixes=(".png",)) == \
        tmp_path / "a.png"
    (tmp_path / "a.png").write_bytes(b"x")
    with pytest.raises(ValueError, match="--plot .* exists; pass --force"):
        output_file(tmp_path / "a.png", flag="--plot")
    assert output_file(tmp_path / "a.png", flag="--plot", force=True) == tmp_path / "a.png"
    with pytest.raises(ValueError, match="is the input file"):
        output_file(tmp_path / "a.png", flag="--plot", force=True, inputs=(tmp_path / "a.png",))
    # the order of the checks: the input file, then the suffix, then an existing file
    with pytest.raises(ValueError, match=r"--out .*a\.png': name a \.json file"):
        output_file(tmp_path / "a.png", flag="--out", suffixes=(".json",))
    assert output_file(tmp_path / "A.PNG", flag="--plot", suffixes=(".png",)).name == "A.PNG"
    with pytest.raises(ValueError, match="^--plot: the path is empty"):
        output_file("", flag="--plot")
    assert output_dir(tmp_path, flag="--out", files=["b.png"]) == tmp_path
    many = [f"f{i}.png" for i in range(9)]
    for name in many:
        (tmp_path / name).write_bytes(b"x")
    with pytest.raises(ValueError, match=r"already holds 9 files .*and 3 more"):
        output_dir(tmp_path, flag="--out", files=many)


# ------------------------------------------------------------------ a closed standard output
def _closed_stdout(*argv, cwd=None):
    """Run dptree-opt with its standard output already closed by the reader: every write
    to it fails (what ``| head`` does, without the race)."""
    proc = subprocess.Popen([sys.executable, "-c",
                             "import sys; from dptree_opt.cli import main; sys.exit(main())",
                             *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.stderr.close()
    return proc.wait(timeout=120), err


@pytest.mark.parametrize("argv", [
    ["--help"],
    COMPARE,
    ["optimize", "--bins", "64", "--epsilon", "1"],
    ["error", "--bins", "16", "--strategy", "binary", "--epsilon", "1"],
    ["figures", "--list"],
], ids=lambda a: " ".join(a[:2]))
def test_closed_stdout_exits_141_without_a_traceback(argv):
    code, err = _closed_stdout(*argv)
    assert code == 141, err
    assert err == ""


def test_closed_stdout_stream_composes(tmp_path):
    """stream handles its own standard output: with --out it carries on and writes the
    release (exit 0); without, it stops like every other command (141); never a traceback."""
    counts = tmp_path / "c.txt"
    counts.write_text("".join(f"{i % 5}\n" for i in range(64)))
    stream = ["stream", "--counts", str(counts), "--epsilon", "1"]
    code, err = _closed_stdout(*stream, "--out", str(tmp_path / "s.json"))
    assert code == 0, err
    assert "Traceback" not in err and "Exception ignored" not in err
    assert (tmp_path / "s.json").stat().st_size > 0
    code, err = _closed_stdout(*stream)
    assert code == 141 and "Traceback" not in err and "Exception ignored" not in err


def test_closed_stdout_release_still_writes_its_out(tmp_path):
    """A release is never lost after the noise: with --out, a closed standard output must
    not keep the JSON from being written (release writes its files before printing)."""
    counts = tmp_path / "c.txt"
    counts.write_text("".join(f"{i % 7}\n" for i in range(32)))
    code, err = _closed_stdout("release", "--counts", str(counts), "--lower", "0", "--upper",
                               "32", "--bins", "32", "--epsilon", "1", "--out",
                               str(tmp_path / "r.json"))
    assert "Traceback" not in err
    assert (tmp_path / "r.json").is_file(), (code, err)


class _GoneReader(io.StringIO):
    def write(self, s):
        raise BrokenPipeError(32, "Broken pipe")


@pytest.mark.parametrize("argv", [["error", "--bins", "8", "--strategy", "histogram",
                                   "--epsilon", "1"], ["--help"]])
def test_closed_stdout_in_process(argv, monkeypatch):
    monkeypatch.setattr(sys, "stdout", _GoneReader())
    assert main(argv) == 141


# ------------------------------------------------------------------ negative numbers
README_GRID = ["release", "trips.csv", "--columns", "lon,lat", "--lower", "-74.3,40.5",
               "--upper", "-73.7,40.9", "--bins", "64x64", "--epsilon", "1"]


def test_readme_grid_example_parses():
    args = build_parser().parse_args(README_GRID)
    assert (args.lower, args.upper, args.bins) == ("-74.3,40.5", "-73.7,40.9", "64x64")


def test_readme_grid_example_releases(tmp_path, opendp_calls):
    """The README's example, on a tiny CSV and 4 x 4 bins (a given tree: the design search is
    not the point): past argparse to a real release."""
    rng = np.random.default_rng(5)
    lon, lat = rng.uniform(-74.3, -73.7, 40), rng.uniform(40.5, 40.9, 40)
    csv = tmp_path / "trips.csv"
    csv.write_text("lon,lat\n" + "".join(f"{a:.6f},{b:.6f}\n" for a, b in zip(lon, lat)))
    argv = [str(csv) if a == "trips.csv" else "4x4" if a == "64x64" else a
            for a in README_GRID]
    code, out, err = run(*argv, "--tree", "4;4")
    assert code == 0, err
    assert "lon: 4 bins over [-74.3, -73.7)" in out and "lat: 4 bins over [40.5, 40.9)" in out
    assert opendp_calls.count("drawn") > 0


@pytest.mark.parametrize("value, needle", [("-1e-3", "epsilon must be finite and > 0"),
                                           ("-.5", "epsilon must be finite and > 0"),
                                           ("-inf", "epsilon must be finite and > 0"),
                                           ("-2,3", "invalid float value: '-2,3'")])
def test_negative_values_reach_the_command(value, needle, capsys):
    """Scientific, leading-dot, infinite and list values get past argparse: the message is
    the command's own (or argparse's about the value's type), never 'expected one
    argument'."""
    try:
        code = main(["error", "--bins", "8", "--strategy", "histogram", "--epsilon", value])
    except SystemExit as exc:  # argparse's type check of --epsilon (float)
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and "expected one argument" not in err
    assert needle in err


def test_real_options_are_never_taken_as_values(capsys):
    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["compare", "--bins", "16", "--plot", "--force"])
    assert "--plot: expected one argument" in capsys.readouterr().err
    join = parser.join_negative_values
    # flags take no value; after "--" nothing is rewritten; an abbreviation is understood
    assert join(["release", "--force", "-1"]) == ["release", "--force", "-1"]
    assert join(["release", "--", "--lower", "-1"]) == ["release", "--", "--lower", "-1"]
    assert join(["release", "--low", "-1,2"]) == ["release", "--low=-1,2"]
    assert join(["release", "--lower", "-info"]) == ["release", "--lower", "-info"]
    assert join(["compare", "--bins", "-5"]) == ["compare", "--bins=-5"]
    assert build_parser().parse_args(["release", "--low", "-1,2", "--upper", "3",
                                      "--bins", "4"]).lower == "-1,2"


def test_an_option_that_looks_like_a_number_is_refused_when_added():
    sub = build_parser().commands["compare"]
    with pytest.raises(ValueError, match="negative number"):
        sub.add_argument("-1x")
