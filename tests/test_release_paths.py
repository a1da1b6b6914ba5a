"""Paths in and out of a release: str and os.PathLike inputs, a clear ValueError for bytes
paths and file objects (before any noise), JSON targets checked before anything is done,
written files with the permissions ``open`` gives, and a release that is never lost when
standard output is a pipe closed early."""

import io
import json
import os
import stat

import numpy as np
import pytest

from dptree_opt.cli import main
from dptree_opt.data_release import release, release_file
from dptree_opt.files import check_output_path, write_text_atomic
from dptree_opt.data_release.result import Release

ONE = dict(lower=0, upper=4, bins=4, epsilon=1.0, tree=[4])
TWO = dict(lower=(0, 0), upper=(4, 4), bins=(2, 2), epsilon=1.0, tree=[[2], [2]])


@pytest.fixture
def files(tmp_path):
    (tmp_path / "s.csv").write_text("v\n1\n2\n3\n")
    (tmp_path / "c.txt").write_text("1\n2\n3\n4\n")
    (tmp_path / "g.csv").write_text("x,y\n1,1\n2,3\n")
    return tmp_path


class _PathLike:
    def __init__(self, path):
        self.path = str(path)

    def __fspath__(self):
        return self.path


# ------------------------------------------------------------------ inputs
@pytest.mark.parametrize("wrap", [str, _PathLike, lambda p: p])
def test_str_and_pathlike_inputs_are_accepted(files, wrap):
    assert release_file(wrap(files / "s.csv"), column="v", **ONE).complete
    assert release_file(counts_file=wrap(files / "c.txt"), **ONE).complete
    assert release_file(wrap(files / "g.csv"), columns=["x", "y"], **TWO).complete


@pytest.mark.parametrize("make, match", [
    (lambda p: os.fsencode(p), "not bytes"),
    (lambda p: open(p), "not an open file object"),
    (lambda p: open(p, "rb"), "not an open file object"),
    (lambda p: io.BytesIO(b"v\n1\n"), "not an open file object"),
    (lambda p: 3, "expected the path of a file"),
    (lambda p: "", "the path is empty"),
    (lambda p: os.path.dirname(p), "is a directory"),
])
def test_bytes_paths_and_file_objects_are_refused_before_any_noise(files, opendp_calls, make,
                                                                   match):
    """release_file(b"s.csv") and file objects raised TypeError."""
    for kw in ({"column": "v", **ONE}, {"columns": ["x", "y"], **TWO}):
        arg = make(str(files / ("s.csv" if "column" in kw else "g.csv")))
        try:
            with pytest.raises(ValueError, match=f"^file.*{match}"):
                release_file(arg, **kw)
        finally:
            if hasattr(arg, "close"):
                arg.close()
    arg = make(str(files / "c.txt"))
    try:
        with pytest.raises(ValueError, match=f"^counts file.*{match}"):
            release_file(counts_file=arg, **ONE)
    finally:
        if hasattr(arg, "close"):
            arg.close()
    assert opendp_calls.events == []


# ------------------------------------------------------------------ the JSON target
@pytest.fixture
def one_release():
    return release(np.array([1.0, 2.0]), **ONE)


@pytest.fixture
def grid_release():
    return release(np.array([[1.0, 1.0], [2.0, 3.0]]), **TWO)


@pytest.mark.parametrize("which", ["one_release", "grid_release"])
def test_to_json_refuses_bad_targets_before_anything(tmp_path, which, request, monkeypatch):
    """to_json(directory, force=True) raised IsADirectoryError after making a temporary
    file: now a ValueError before the JSON is even built."""
    r = request.getfixturevalue(which)
    built = []
    monkeypatch.setattr(type(r), "to_dict", lambda self, **k: built.append(1) or {})
    (tmp_path / "keep").write_text("x")
    for target, match in ((tmp_path, "is a directory"),
                          (tmp_path / "missing" / "r.json", "does not exist"),
                          (os.fsencode(tmp_path / "r.json"), "expected a file path")):
        for force in (False, True):
            with pytest.raises(ValueError, match=match):
                r.to_json(target, force=force)
    assert built == [] and os.listdir(tmp_path) == ["keep"]


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o002, 0o077])
def test_written_files_get_the_mode_open_gives(tmp_path, one_release, umask):
    """mkstemp made every JSON 0600 whatever the umask; open() gives 0666 & ~umask to a new
    file and keeps the mode of a file it overwrites."""
    old = os.umask(umask)
    try:
        new = tmp_path / "new.json"
        one_release.to_json(new)
        assert _mode(new) == 0o666 & ~umask
        with open(tmp_path / "by_open.txt", "w") as f:   # the reference: open() itself
            f.write("x")
        assert _mode(new) == _mode(tmp_path / "by_open.txt")
        kept = tmp_path / "kept.json"
        kept.write_text("old")
        os.chmod(kept, 0o640)
        write_text_atomic(kept, "new", force=True)
        assert kept.read_text() == "new" and _mode(kept) == 0o640
    finally:
        os.umask(old)
    assert sorted(os.listdir(tmp_path)) == ["by_open.txt", "kept.json", "new.json"]


def test_output_checks_name_the_flag(tmp_path):
    with pytest.raises(ValueError, match="^--plot: expected a file path"):
        check_output_path(b"x.png", flag="--plot")
    with pytest.raises(ValueError, match="^--out .* is a directory"):
        check_output_path(tmp_path)


# ------------------------------------------------------------------ standard output closed
class _ClosedPipe(io.StringIO):
    def write(self, text):
        raise BrokenPipeError(32, "Broken pipe")


def _counts(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("3\n1\n4\n1\n")
    return path


@pytest.mark.parametrize("extra", [[], ["--columns", "x,y"]])
def test_the_release_is_written_before_stdout_and_survives_a_closed_pipe(tmp_path, monkeypatch,
                                                                        extra):
    """The summary was printed before --out was written: piped to `head`, a BrokenPipeError
    after the noise lost the release. Now --out and --plot are written first."""
    if extra:
        src = tmp_path / "g.csv"
        src.write_text("x,y\n1,1\n2,3\n3,0.5\n")
        args = ["release", str(src), *extra, "--lower", "0,0", "--upper", "4,4", "--bins",
                "2x2", "--tree", "2;2"]
    else:
        args = ["release", "--counts", str(_counts(tmp_path)), "--lower", "0", "--upper",
                "4", "--bins", "4", "--tree", "4"]
    out, png = tmp_path / "r.json", tmp_path / "r.png"
    monkeypatch.setattr("sys.stdout", _ClosedPipe())
    code = main(args + ["--epsilon", "1", "--out", str(out), "--plot", str(png)])
    assert code == 141
    d = json.loads(out.read_text())
    assert d["complete"] is True and png.read_bytes()[:4] == b"\x89PNG"


def test_without_out_a_closed_pipe_sends_the_release_to_stderr(tmp_path, monkeypatch, capsys):
    """No --out and standard output closed after the noise: the release (JSON, with the
    measurements) goes to stderr instead of being lost; exit 141."""
    monkeypatch.setattr("sys.stdout", _ClosedPipe())
    code = main(["release", "--counts", str(_counts(tmp_path)), "--lower", "0", "--upper", "4",
                 "--bins", "4", "--tree", "4", "--epsilon", "1"])
    assert code == 141
    err = capsys.readouterr().err
    d = json.loads(err[err.index("\n{") + 1:])
    assert d["complete"] is True and len(d["measurements"]) == 5   # root + 4 leaves


def test_list_options_refuse_empty_values(tmp_path, opendp_calls):
    """`--lower -74.3,,40.5` was read as two values; a trailing comma too. Every list option
    of `release` refuses an empty item, before anything is read."""
    src = tmp_path / "g.csv"
    src.write_text("x,y\n1,1\n2,3\n")
    base = ["release", str(src), "--columns", "x,y", "--epsilon", "1"]
    for bad in (["--lower", "-74.3,,40.5", "--upper", "0,50", "--bins", "2x2"],
                ["--lower", "0,0,", "--upper", "4,4", "--bins", "2x2"],
                ["--lower", "0,0", "--upper", "4,4", "--bins", "2xx2"],
                ["--lower", "0,0", "--upper", "4,4", "--bins", "2x2", "--tree", "2;;2"],
                ["--lower", "0,0", "--upper", "4,4", "--bins", "2x2", "--tree", "2,;2"]):
        assert main(base + bad) == 2, bad
    assert main(["release", str(src), "--columns", "x,,y", "--lower", "0,0", "--upper", "4,4",
                 "--bins", "2x2", "--epsilon", "1"]) == 2
    assert opendp_calls.events == []


def test_a_plot_failure_after_the_noise_is_reported_not_raised(tmp_path, monkeypatch, capsys):
    def broken(self, *a, **k):
        raise RuntimeError("matplotlib exploded")

    monkeypatch.setattr(Release, "plot", broken)
    out = tmp_path / "r.json"
    code = main(["release", "--counts", str(_counts(tmp_path)), "--lower", "0", "--upper",
                 "4", "--bins", "4", "--tree", "4", "--epsilon", "1", "--out", str(out),
                 "--plot", str(tmp_path / "r.png")])
    cap = capsys.readouterr()
    assert code == 1 and json.loads(out.read_text())["complete"] is True
    assert "could not write the plot" in cap.err and "matplotlib exploded" in cap.err
    assert "Traceback" not in cap.err and "written:" in cap.out


@pytest.mark.parametrize("where", ["json", "plot"])
def test_ctrl_c_while_writing_keeps_the_release(tmp_path, monkeypatch, capsys, where):
    """Ctrl-C while --out or --plot is written (after the noise) stopped the command and, with
    the JSON not yet written, lost the release: now the failed file is reported, the summary
    printed, the JSON written (or printed when it was the JSON); exit 1."""
    from dptree_opt.cli import release_cmd

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    if where == "json":
        monkeypatch.setattr(Release, "to_json", lambda self, path=None, **kw: (
            interrupted() if path is not None else json.dumps({"complete": self.complete})))
    else:
        monkeypatch.setattr(release_cmd, "_plot", interrupted)
    out, png = tmp_path / "r.json", tmp_path / "r.png"
    code = main(["release", "--counts", str(_counts(tmp_path)), "--lower", "0", "--upper",
                 "4", "--bins", "4", "--tree", "4", "--epsilon", "1", "--out", str(out),
                 "--plot", str(png)])
    cap = capsys.readouterr()
    assert code == 1 and "N (private" in cap.out and "Traceback" not in cap.err
    if where == "json":
        assert f"could not write {str(out)!r} (interrupted)" in cap.err and not out.exists()
        assert '{"complete": true}' in cap.out
    else:
        assert f"could not write the plot {str(png)!r} (interrupted)" in cap.err
        assert json.loads(out.read_text())["complete"] is True and not png.exists()


def test_notes_follow_the_summary(tmp_path, monkeypatch):
    """The notes (stderr) came before the header and summary (stdout) they are about."""
    both = io.StringIO()
    monkeypatch.setattr("sys.stdout", both)
    monkeypatch.setattr("sys.stderr", both)
    path = tmp_path / "c.txt"
    path.write_text("0\n0\n0\n0\n")
    assert main(["release", "--counts", str(path), "--lower", "0", "--upper", "4", "--bins",
                 "4", "--tree", "4", "--rho", "1", "--neighbours", "swap"]) == 0
    text = both.getvalue()
    assert text.index("WARNING: swap") < text.index("private release of counts file")
    assert text.index("note: N = 0: the data are empty") > text.index(" quantile ")


def test_bins_take_a_capital_x(tmp_path):
    """--bins 2X2 was refused ('expected an integer'); the other --bins options take it."""
    src = tmp_path / "g.csv"
    src.write_text("x,y\n1,1\n2,3\n")
    assert main(["release", str(src), "--columns", "x,y", "--lower", "0,0", "--upper", "4,4",
                 "--bins", "2X2", "--tree", "2;2", "--epsilon", "1"]) == 0
