"""`dptree-opt stream` held to the release rules: nothing exact about the data in any output
(a bad line of standard input, found after the noise, is neither quoted nor described), output
paths checked before the noise, the JSON on disk kept up to date and complete on every stop,
long lines and bad horizons refused at no cost, size limits before allocating, a simulation
that says so, --quiet refused without --out / --plot (the release would be lost), one rule
for a count line, refusals that name the command's flags."""

import io
import json
import math
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from dptree_opt.cli import main, stream_cmd, stream_input, stream_release
from dptree_opt.data_release import io as rio


# ------------------------------------------------------------------ helpers
def _steps(stdout: str) -> list[tuple[int, str, str]]:
    """The step lines printed on stdout: (step, estimate, standard error) as printed."""
    rows = [ln for ln in stdout.splitlines() if ln and not ln.startswith("#")]
    assert not rows or rows[0] == "step,estimate,standard_error", rows[:1]
    return [(int(a), b, c) for a, b, c in (r.split(",") for r in rows[1:])]


def _same_steps(doc: dict, printed) -> None:
    """The JSON holds exactly the printed steps (compared at the printed precision)."""
    assert doc["steps"] == len(printed) == len(doc["estimate"]) == len(doc["standard_error"])
    for i, (step, est, se) in enumerate(printed):
        assert step == i + 1
        e, s = doc["estimate"][i], doc["standard_error"][i]
        assert f"{math.nan if e is None else e:.10g}" == est
        assert f"{math.inf if s is None else s:.6g}" == se


class _Stdin:
    """A text standard input without a file descriptor: ``lines`` one per ``readline``;
    ``hook(i)`` is called before line i (0-based) is handed out. ``chars`` counts what was
    handed out."""

    def __init__(self, lines, hook=None):
        self.lines, self.hook, self.i, self.chars = list(lines), hook, 0, 0

    def readline(self, size=-1):
        if self.hook is not None:
            self.hook(self.i)
        if self.i >= len(self.lines):
            return ""
        line = self.lines[self.i]
        if 0 <= size < len(line):   # a long line comes in pieces, like a real file object
            self.lines[self.i] = line[size:]
            line = line[:size]
        else:
            self.i += 1
        self.chars += len(line)
        return line


def _counts_stdin(counts, **kw):
    return _Stdin([f"{c}\n" for c in counts], **kw)


# ------------------------------------------------------------------ nothing exact about the data
def _token(n: int):
    """n as a whole number anywhere in a text (not a part of another number)."""
    return re.compile(rf"(?<![\d.]){n}(?![\d.])")


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("source", ["column", "counts", "stdin"])
def test_exact_total_never_appears_in_any_output(tmp_path, capsys, monkeypatch, seed, source):
    rng = np.random.default_rng(seed)
    total = int(rng.integers(1000, 9999))
    while total & (total - 1) == 0 or total in (1440, 3600, 8640):   # no account number
        total += 1
    steps = 24
    times = rng.uniform(0, 24, total)
    counts = np.histogram(times, bins=steps, range=(0, 24))[0]
    assert counts.sum() == total
    titles = []

    def capture(fig, path, **kw):   # every text of the figure: title, labels, legend, ticks
        titles.extend(t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text")))
        with open(path, "wb") as f:
            f.write(b"png")
    monkeypatch.setattr("dptree_opt.plotting.save_figure", capture)
    mech = ["--mechanism", ["binary", "kary", "tree_blue", "negative_digits"][seed]]
    if seed in (1, 3):
        mech += ["--branching", "3"]
    out, png = tmp_path / "run.json", tmp_path / "run.png"
    common = ["--epsilon", "0.5", *mech, "--seed", str(seed), "--out", str(out),
              "--plot", str(png)]
    if source == "column":
        f = tmp_path / "events.csv"
        f.write_text("time\n" + "\n".join(f"{t:.9f}" for t in times) + "\n")
        argv = [str(f), "--column", "time", "--lower", "0", "--upper", "24", "--steps",
                str(steps)]
    elif source == "counts":
        f = tmp_path / "counts.txt"
        f.write_text("\n".join(map(str, counts)) + "\n")
        argv = ["--counts", str(f)]
    else:
        monkeypatch.setattr("sys.stdin", _counts_stdin(counts))
        argv = ["--counts", "-", "--horizon", str(steps)]
    assert main(["stream", *argv, *common]) == 0
    cap = capsys.readouterr()
    doc = json.loads(out.read_text())
    assert doc["steps"] == steps and titles
    pattern = _token(total)
    for where, text in [("stdout", cap.out), ("stderr", cap.err), ("JSON", out.read_text()),
                        ("plot", "\n".join(titles))]:
        assert not pattern.search(text), (where, total, pattern.search(text))


# ------------------------------------------------------------------ output paths, first
def _counts_file(tmp_path, n=6):
    f = tmp_path / "c.txt"
    f.write_text("\n".join(["3"] * n) + "\n")
    return f


@pytest.mark.parametrize("case", ["out_dir", "out_missing_parent", "out_exists",
                                  "out_is_input", "out_suffix", "plot_dir", "plot_exists",
                                  "plot_suffix", "plot_is_out", "plot_missing_parent"])
def test_bad_output_paths_are_refused_before_anything(tmp_path, capsys, opendp_calls, case):
    f = _counts_file(tmp_path)
    existing = tmp_path / "old.json"
    existing.write_text("keep me")
    old_png = tmp_path / "old.png"
    old_png.write_bytes(b"keep me")
    flag, path = {
        "out_dir": ("--out", tmp_path),
        "out_missing_parent": ("--out", tmp_path / "no" / "r.json"),
        "out_exists": ("--out", existing),
        "out_is_input": ("--out", f),
        "out_suffix": ("--out", tmp_path / "r.png"),
        "plot_dir": ("--plot", tmp_path),
        "plot_exists": ("--plot", old_png),
        "plot_suffix": ("--plot", tmp_path / "r.jpg"),
        "plot_is_out": ("--plot", tmp_path / "same.png"),
        "plot_missing_parent": ("--plot", tmp_path / "no" / "r.png"),
    }[case]
    argv = ["stream", "--counts", str(f), "--epsilon", "1", flag, str(path)]
    if case == "plot_is_out":   # a link named .png to the --out file
        (tmp_path / "same.json").write_text("keep me")
        path.symlink_to(tmp_path / "same.json")
        argv += ["--out", str(tmp_path / "same.json"), "--force"]
    if case == "out_is_input":
        argv += ["--force"]   # not even with --force
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("dptree-opt: error: ") and flag in err, err
    assert opendp_calls.count("built") == 0   # before the counter, so before any noise
    assert existing.read_text() == "keep me" and old_png.read_bytes() == b"keep me"
    if case == "plot_is_out":
        assert "same file" in err and (tmp_path / "same.json").read_text() == "keep me"
    assert f.read_text() == "3\n" * 6


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="root writes into read-only directories")
def test_unwritable_output_directory_is_refused_first(tmp_path, capsys, opendp_calls):
    f = _counts_file(tmp_path)
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        assert main(["stream", "--counts", str(f), "--epsilon", "1", "--out",
                     str(ro / "r.json")]) == 2
    finally:
        ro.chmod(0o700)
    assert "not writable" in capsys.readouterr().err and opendp_calls.count("built") == 0


def test_force_overwrites_an_existing_output(tmp_path, capsys):
    f = _counts_file(tmp_path)
    out = tmp_path / "r.json"
    out.write_text("old")
    assert main(["stream", "--counts", str(f), "--epsilon", "1", "--seed", "0", "--out",
                 str(out), "--force"]) == 0
    _same_steps(json.loads(out.read_text()), _steps(capsys.readouterr().out))


def test_json_on_disk_follows_the_stream(tmp_path, monkeypatch, capsys):
    """With the flush interval at 0 the JSON is rewritten after every step: whenever the next
    line is read, the file on disk parses and holds exactly the steps printed so far."""
    monkeypatch.setattr(stream_release, "FLUSH_SECONDS", 0.0)
    monkeypatch.setattr(stream_release, "FLUSH_COST", 0.0)
    out = tmp_path / "r.json"
    printed, checks = [], []

    def hook(i):
        printed.append(capsys.readouterr().out)
        if i:
            doc = json.loads(out.read_text())
            _same_steps(doc, _steps("".join(printed)))
            checks.append(doc["status"])
    monkeypatch.setattr("sys.stdin", _counts_stdin(range(10), hook=hook))
    assert main(["stream", "--counts", "-", "--horizon", "10", "--rho", "1", "--seed", "2",
                 "--mechanism", "sqrt", "--out", str(out)]) == 0
    assert checks == ["running"] * 10
    printed.append(capsys.readouterr().out)
    _same_steps(json.loads(out.read_text()), _steps("".join(printed)))


def test_flush_policy_bounds_the_writes(tmp_path, monkeypatch, capsys):
    """Default policy: at most one rewrite a second (plus the first and the last)."""
    times = iter(range(10**6))   # a clock that advances 0.1 s per reading
    monkeypatch.setattr(stream_release, "clock", lambda: next(times) / 10)
    writes = []
    real = stream_release.StreamRelease.write

    def count(self):
        writes.append(self.n)
        real(self)
    monkeypatch.setattr(stream_release.StreamRelease, "write", count)
    f = tmp_path / "c.txt"
    f.write_text("1\n" * 200)
    assert main(["stream", "--counts", str(f), "--epsilon", "1", "--seed", "0", "--quiet",
                 "--out", str(tmp_path / "r.json")]) == 0
    assert writes[0] == 0 and writes[-1] == 200
    gaps = np.diff(writes[1:-1])
    assert len(writes) > 2, writes   # the fake clock reached the policy: rewrites happened
    assert len(writes) < 200 / 3 and (gaps >= 3).all(), writes  # >= 1 s of 3+ readings apart


# ------------------------------------------------------------------ every stop keeps the release
def _raise_at(k, exc):
    def hook(i):
        if i == k:
            raise exc
    return hook


def _sigterm_at(k):
    def hook(i):
        if i == k:
            os.kill(os.getpid(), signal.SIGTERM)
    return hook


@pytest.mark.parametrize("kind, lines, hook, code, reason", [
    ("bad line", ["1\n", "2\n", "3\n", "x\n", "5\n"], None, 2, "line 4"),
    ("negative", ["1\n", "2\n", "-3\n"], None, 2, "non-negative"),
    ("past horizon", [f"{i}\n" for i in range(7)], None, 2, "past the horizon T = 5"),
    ("keyboard interrupt", [f"{i}\n" for i in range(9)], _raise_at(4, KeyboardInterrupt),
     130, "interrupted"),
    ("SIGTERM", [f"{i}\n" for i in range(9)], _sigterm_at(3), 128 + signal.SIGTERM,
     "SIGTERM"),
])
def test_every_stop_writes_the_released_steps(tmp_path, monkeypatch, capsys, opendp_calls,
                                              kind, lines, hook, code, reason):
    monkeypatch.setattr("sys.stdin", _Stdin(lines, hook=hook))
    out = tmp_path / "r.json"
    previous = signal.signal(signal.SIGTERM, lambda *a: None)   # never kill the test run
    try:
        assert main(["stream", "--counts", "-", "--horizon", "5", "--epsilon", "1",
                     "--out", str(out)]) == code
        assert signal.getsignal(signal.SIGTERM) is not previous   # restored: our no-op
    finally:
        signal.signal(signal.SIGTERM, previous)
    cap = capsys.readouterr()
    doc = json.loads(out.read_text())
    printed = _steps(cap.out)
    assert doc["status"] == "incomplete" and reason in doc["stopped"]
    _same_steps(doc, printed)
    assert len(printed) >= 1 and opendp_calls.count("drawn") > 0
    assert cap.out.splitlines()[-1].startswith("# status: INCOMPLETE")
    assert "INCOMPLETE" in cap.err and reason in cap.err and "Traceback" not in cap.err
    assert f"written to {str(out)!r} (status \"incomplete\")" in cap.err   # the JSON's status


def test_a_signal_during_a_step_lets_the_step_finish(tmp_path, monkeypatch, capsys):
    """SIGTERM while step 3 is being drawn: step 3 is released, printed and written whole,
    then the stream stops."""
    real = stream_cmd.Counter

    class Signalling(real):
        def update(self, count):
            if self.t == 2:
                os.kill(os.getpid(), signal.SIGTERM)
            return super().update(count)
    monkeypatch.setattr(stream_cmd, "Counter", Signalling)
    monkeypatch.setattr("sys.stdin", _counts_stdin(range(6)))
    out = tmp_path / "r.json"
    previous = signal.signal(signal.SIGTERM, lambda *a: None)   # never kill the test run
    try:
        assert main(["stream", "--counts", "-", "--horizon", "6", "--epsilon", "1", "--seed",
                     "0", "--out", str(out)]) == 128 + signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, previous)
    doc = json.loads(out.read_text())
    assert doc["steps"] == 3 and "SIGTERM" in doc["stopped"]
    _same_steps(doc, _steps(capsys.readouterr().out))


def test_an_unexpected_error_writes_the_release_then_surfaces(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", _counts_stdin(range(9), hook=_raise_at(
        4, RuntimeError("disk on fire"))))
    out = tmp_path / "r.json"
    with pytest.raises(RuntimeError, match="disk on fire"):
        main(["stream", "--counts", "-", "--horizon", "9", "--epsilon", "1", "--out",
              str(out), "--seed", "0"])
    doc = json.loads(out.read_text())
    assert doc["status"] == "incomplete" and "disk on fire" in doc["stopped"]
    _same_steps(doc, _steps(capsys.readouterr().out))
    assert doc["steps"] == 4


def test_a_counter_refusal_mid_stream_keeps_the_release(tmp_path, monkeypatch, capsys):
    """A step the counter refuses (here: the running count would reach 2^53) stops the
    stream with the steps before it on disk."""
    big = 2**52
    monkeypatch.setattr("sys.stdin", _counts_stdin([1, big, big, 1]))
    out = tmp_path / "r.json"
    assert main(["stream", "--counts", "-", "--unbounded", "--epsilon", "1", "--seed", "0",
                 "--out", str(out)]) == 2
    cap = capsys.readouterr()
    doc = json.loads(out.read_text())
    assert doc["status"] == "incomplete" and "2^53" in doc["stopped"] and doc["steps"] == 2
    _same_steps(doc, _steps(cap.out))
    assert str(2 * big + 1) not in cap.err + cap.out + out.read_text()   # not the total


class _ClosingStdout(io.StringIO):
    """A stdout whose reader goes away after ``keep`` lines."""

    def __init__(self, keep):
        super().__init__()
        self.keep = keep

    def write(self, text):
        if self.getvalue().count("\n") >= self.keep:
            raise BrokenPipeError(32, "Broken pipe")
        return super().write(text)


def test_closed_stdout_with_out_finishes_the_release(tmp_path, monkeypatch, capsys):
    f = _counts_file(tmp_path, 40)
    out = tmp_path / "r.json"
    fake = _ClosingStdout(keep=5)
    monkeypatch.setattr("sys.stdout", fake)
    assert main(["stream", "--counts", str(f), "--epsilon", "1", "--seed", "0", "--out",
                 str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["status"] == "complete" and doc["steps"] == 40
    assert "Traceback" not in capsys.readouterr().err


def test_closed_stdout_without_out_stops(tmp_path, monkeypatch, capsys, opendp_calls):
    f = _counts_file(tmp_path, 64)
    monkeypatch.setattr("sys.stdout", _ClosingStdout(keep=20))
    assert main(["stream", "--counts", str(f), "--epsilon", "1"]) == 141
    # 64 steps would draw 127 nodes; the stream stopped soon after the reader left
    assert 0 < opendp_calls.count("drawn") < 127
    assert capsys.readouterr().err == ""


def test_a_failed_rewrite_stops_and_the_release_goes_to_stdout(tmp_path, monkeypatch,
                                                               capsys):
    monkeypatch.setattr(stream_release, "FLUSH_SECONDS", 0.0)
    monkeypatch.setattr(stream_release, "FLUSH_COST", 0.0)
    from dptree_opt import files as output
    real, calls = output.write_text_atomic, []

    def flaky(path, text, **kw):
        calls.append(1)
        if len(calls) >= 4:
            raise OSError(28, "No space left on device")
        return real(path, text, **kw)
    monkeypatch.setattr(output, "write_text_atomic", flaky)
    out = tmp_path / "r.json"
    assert main(["stream", "--counts", str(_counts_file(tmp_path, 10)), "--epsilon", "1",
                 "--seed", "0", "--out", str(out)]) == 1
    cap = capsys.readouterr()
    assert "No space left" in cap.err and "follows on stdout" in cap.err
    doc = json.loads(cap.out[cap.out.index("\n{") + 1:])   # the JSON after the step lines
    assert doc["status"] == "incomplete" and doc["steps"] == 3
    _same_steps(doc, _steps(cap.out[:cap.out.index("\n{") + 1]))
    assert json.loads(out.read_text())["steps"] == 2   # the last write that worked


def test_output_directory_removed_mid_stream(tmp_path, monkeypatch, capsys):
    """The directory of --out disappears after step 3: the stream stops at once and the
    release (every printed step) follows on stdout, as JSON."""
    monkeypatch.setattr(stream_release, "FLUSH_SECONDS", 0.0)
    monkeypatch.setattr(stream_release, "FLUSH_COST", 0.0)
    where = tmp_path / "d"
    where.mkdir()

    def hook(i):
        if i == 3:
            (where / "r.json").rename(tmp_path / "moved.json")
            where.rmdir()
    monkeypatch.setattr("sys.stdin", _counts_stdin(range(8), hook=hook))
    assert main(["stream", "--counts", "-", "--horizon", "8", "--epsilon", "1", "--seed", "0",
                 "--out", str(where / "r.json")]) == 1
    cap = capsys.readouterr()
    assert "could not write" in cap.err and "Traceback" not in cap.err
    doc = json.loads(cap.out[cap.out.index("\n{") + 1:])
    assert doc["status"] == "incomplete" and "could not rewrite --out" in doc["stopped"]
    _same_steps(doc, _steps(cap.out[:cap.out.index("\n{") + 1]))
    assert doc["steps"] == 4


_PROCESS = textwrap.dedent("""
    import sys
    from dptree_opt.cli import main
    sys.exit(main(sys.argv[1:]))
""")


def test_sigterm_on_a_running_process(tmp_path):
    """A real process on a pipe: the steps answered are on disk while it waits for input;
    SIGTERM writes them with status incomplete and exits 128 + 15."""
    out = tmp_path / "r.json"
    proc = subprocess.Popen(
        [sys.executable, "-c", _PROCESS, "stream", "--counts", "-", "--horizon", "100",
         "--epsilon", "1", "--out", str(out)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        proc.stdin.write("4\n7\n1\n")
        proc.stdin.flush()
        lines = []
        while len([ln for ln in lines if ln[:1].isdigit()]) < 3:
            lines.append(proc.stdout.readline())
        for _ in range(600):   # written within about a second of waiting (no time asserted)
            doc = json.loads(out.read_text())
            if doc["steps"] == 3:
                break
            assert proc.poll() is None
            time.sleep(0.05)
        assert doc["status"] == "running" and doc["steps"] == 3
        proc.send_signal(signal.SIGTERM)
        rest, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err
    doc = json.loads(out.read_text())
    assert doc["status"] == "incomplete" and "SIGTERM" in doc["stopped"]
    _same_steps(doc, _steps("".join(lines) + rest))
    assert "Traceback" not in err and "INCOMPLETE" in err


def test_pipe_to_head_no_traceback_and_complete_json(tmp_path):
    f = tmp_path / "c.txt"
    f.write_text("2\n" * 20000)
    out = tmp_path / "r.json"
    cmd = (f"{sys.executable} -c '{_PROCESS}' stream --counts {f} --rho 1 --seed 0 "
           f"--out {out} | head -n 3")
    res = subprocess.run(["bash", "-c", "set -o pipefail; " + cmd], capture_output=True,
                         text=True, timeout=300)
    assert res.stdout.count("\n") == 3 and res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr and "BrokenPipe" not in res.stderr
    doc = json.loads(out.read_text())
    assert doc["status"] == "complete" and doc["steps"] == 20000


# ------------------------------------------------------------------ standard input, horizons
def test_a_huge_line_on_stdin_is_refused_without_reading_it(tmp_path, monkeypatch, capsys):
    stdin = _Stdin(["1\n", "9" * 20_000_000 + "\n", "2\n"])
    monkeypatch.setattr("sys.stdin", stdin)
    out = tmp_path / "r.json"
    assert main(["stream", "--counts", "-", "--horizon", "3", "--epsilon", "1", "--seed", "0",
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "line 2 is not a valid count" in err and "at most 1024 characters" in err
    assert stdin.chars <= 2 + rio.MAX_COUNT_LINE + 3   # the line was never read whole
    doc = json.loads(out.read_text())
    assert doc["status"] == "incomplete" and doc["steps"] == 1


def test_a_huge_line_on_a_stdin_descriptor_is_refused_after_one_block(tmp_path, monkeypatch,
                                                                       capsys):
    f = tmp_path / "in.txt"
    f.write_bytes(b"1\n" + b"7" * 20_000_000 + b"\n2\n")
    with open(f) as stdin:   # a real file object: read through its descriptor
        monkeypatch.setattr("sys.stdin", stdin)
        assert main(["stream", "--counts", "-", "--horizon", "3", "--epsilon", "1",
                     "--seed", "0"]) == 2
        consumed = os.lseek(stdin.fileno(), 0, os.SEEK_CUR)
    assert "line 2 is not a valid count" in capsys.readouterr().err
    assert consumed <= 2 * 65536


@pytest.mark.parametrize("horizon", ["0", "-3"])
def test_non_positive_horizon_is_refused(tmp_path, capsys, opendp_calls, horizon):
    f = _counts_file(tmp_path)
    assert main(["stream", "--counts", str(f), "--epsilon", "1", "--horizon", horizon]) == 2
    assert "--horizon must be a positive integer" in capsys.readouterr().err
    assert opendp_calls.count("built") == 0


def test_steps_must_be_positive(tmp_path, capsys, opendp_calls):
    assert main(["stream", str(tmp_path / "not_read.csv"), "--column", "t", "--lower", "0",
                 "--upper", "1", "--steps", "0", "--epsilon", "1"]) == 2
    err = capsys.readouterr().err
    assert "--steps must be a positive integer" in err and "wider" not in err
    assert opendp_calls.events == []


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes")
def test_counts_from_a_pipe_points_to_standard_input(tmp_path, capsys, opendp_calls):
    """--counts /dev/stdin (a pipe) or a FIFO is not a file that can be validated in full
    before the noise: refused (without opening it: nothing blocks), naming --counts -."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert main(["stream", "--counts", str(fifo), "--epsilon", "1"]) == 2
    err = capsys.readouterr().err
    assert "is not a regular file" in err and "--counts - (standard input)" in err
    assert opendp_calls.events == []


def test_counts_file_longer_than_horizon_is_refused_before_noise(tmp_path, capsys,
                                                                 opendp_calls):
    f = _counts_file(tmp_path, 9)
    assert main(["stream", "--counts", str(f), "--epsilon", "1", "--horizon", "8"]) == 2
    assert "exceed the --horizon 8" in capsys.readouterr().err
    assert opendp_calls.count("built") == 0


def test_counts_stream_reader_rules():
    lines = [b"\xef\xbb\xbfcount", b"0", b"00", b'"7"', b"3.000", b"+2", b"", b" 12 "]
    assert list(rio.count_lines(lines)) == [(2, 0), (3, 0), (4, 7), (5, 3), (6, 2), (8, 12)]
    with pytest.raises(ValueError, match="UTF-16"):
        list(rio.count_lines([b"\xff\xfe1\x00"]))
    with pytest.raises(ValueError, match="line 2 is not UTF-8"):
        list(rio.count_lines([b"1", b"\xc3\x28"]))
    with pytest.raises(ValueError, match="line 2: '1e3' must be a non-negative integer .* "
                                         "plain decimal digits.* no exponent"):
        list(rio.count_lines(["1", "1e3"]))
    with pytest.raises(ValueError, match=r"line 1: 'x' is not a number"):
        list(rio.count_lines(["x"]))
    with pytest.raises(ValueError, match="line 1: the count is >= 2"):
        list(rio.count_lines(["9" * 17]))
    near = 2**53 - 1
    with pytest.raises(ValueError, match="line 2: the running count reaches 2") as e:
        list(rio.count_lines([str(near), "6"]))
    assert str(near + 6) not in str(e.value)   # the total is never quoted
    longest = "0" * (rio.MAX_COUNT_LINE - 1) + "7"   # 1024 characters: accepted
    for line in [longest, longest + "\r\n", longest.encode() + b"\n"]:
        assert list(rio.count_lines([line])) == [(1, 7)]
    for line in ["0" + longest, b"0" + longest.encode() + b"\r\n"]:
        with pytest.raises(ValueError, match="line 1 is longer than 1024 characters"):
            list(rio.count_lines([line]))
    with pytest.raises(ValueError) as e:
        list(rio.count_lines(["a" * 500]))
    assert "a" * 38 not in str(e.value)   # at most 40 characters of a bad line


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 65536])
def test_line_ends_are_counted_once_across_blocks(monkeypatch, chunk):
    """LF, CRLF and CR line ends, a CRLF cut between two reads: same lines, same numbers."""
    data = b"1\r\n2\r3\n\r\n4\r\n5"
    monkeypatch.setattr(stream_input, "READ_BYTES", chunk)
    buf = io.BytesIO(data)
    got = list(rio.count_lines(stream_input.byte_lines(buf.read, "s"), "s"))
    assert got == [(1, 1), (2, 2), (3, 3), (5, 4), (6, 5)]


# ------------------------------------------------------------------ limits, simulation, options
def test_steps_beyond_the_limit_are_refused_before_reading(tmp_path, capsys, opendp_calls):
    missing = tmp_path / "not_read.csv"   # the size is refused before the file is looked at
    assert main(["stream", str(missing), "--column", "t", "--lower", "0", "--upper", "1",
                 "--steps", str(2**26), "--epsilon", "1"]) == 2
    err = capsys.readouterr().err
    assert "--steps" in err and str(2**22) in err and "not_read" not in err
    assert opendp_calls.count("built") == 0


@pytest.mark.parametrize("argv, match", [
    (["--horizon", str(2**41)], "--horizon must be a positive integer T <= 2\\^40"),
    (["--horizon", str(2**22 + 1), "--out", "{tmp}/r.json"],
     (r"--horizon 4194305 \(with --out / --plot, which hold every step\) is above the limit "
      r"of 2\^22 = 4194304")),
    (["--horizon", str(2**22 + 1), "--plot", "{tmp}/r.png"], "with --out / --plot"),
])
def test_horizon_limits_name_the_flag(tmp_path, monkeypatch, capsys, opendp_calls, argv,
                                      match):
    monkeypatch.setattr("sys.stdin", _counts_stdin([1, 2]))
    argv = [a.format(tmp=tmp_path) for a in argv]
    assert main(["stream", "--counts", "-", "--epsilon", "1", *argv]) == 2
    assert re.search(match, capsys.readouterr().err)
    assert opendp_calls.count("built") == 0


def test_long_horizon_without_outputs_is_fine(monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", _counts_stdin([1, 2]))
    assert main(["stream", "--counts", "-", "--epsilon", "1", "--seed", "0",
                 "--horizon", str(2**30)]) == 0
    assert len(_steps(capsys.readouterr().out)) == 2


def test_unbounded_stream_stops_at_what_out_can_hold(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(stream_cmd, "MAX_STEPS", 5)
    monkeypatch.setattr("sys.stdin", _counts_stdin(range(8)))
    out = tmp_path / "r.json"
    assert main(["stream", "--counts", "-", "--unbounded", "--epsilon", "1", "--seed", "0",
                 "--out", str(out)]) == 2
    doc = json.loads(out.read_text())
    assert doc["status"] == "incomplete" and doc["steps"] == 5 and "can hold" in doc["stopped"]
    _same_steps(doc, _steps(capsys.readouterr().out))


def test_counts_file_over_the_limit_is_refused_before_noise(tmp_path, monkeypatch, capsys,
                                                           opendp_calls):
    monkeypatch.setattr(stream_cmd, "MAX_STEPS", 5)
    assert main(["stream", "--counts", str(_counts_file(tmp_path, 6)), "--epsilon", "1"]) == 2
    assert "more than 5 counts" in capsys.readouterr().err
    assert opendp_calls.count("built") == 0


def test_a_simulation_says_so_first(tmp_path, capsys):
    f = _counts_file(tmp_path)
    out = tmp_path / "r.json"
    assert main(["stream", "--counts", str(f), "--epsilon", "1", "--seed", "4", "--out",
                 str(out)]) == 0
    cap = capsys.readouterr()
    assert cap.out.splitlines()[0].startswith("# SIMULATION, NOT PRIVATE (--seed 4")
    assert cap.err.startswith("SIMULATION, NOT PRIVATE")
    doc = json.loads(out.read_text())
    assert doc["simulation"] is True and "NOT PRIVATE" in doc["privacy"]
    assert "NO privacy" in doc["account"]["sampler"]
    out.unlink()
    assert main(["stream", "--counts", str(f), "--epsilon", "1", "--out", str(out)]) == 0
    cap = capsys.readouterr()
    assert cap.out.splitlines()[0].startswith("# private running counts (event-level DP)")
    assert "SIMULATION" not in cap.out + cap.err
    doc = json.loads(out.read_text())
    assert doc["simulation"] is False and "NOT" not in doc["privacy"]


@pytest.mark.parametrize("mechanism, budget", [
    ("sqrt", ["--rho", "1"]), ("blt", ["--rho", "1"]),
    ("negative_digits", ["--epsilon", "1", "--branching", "3"]),
])
def test_causal_estimator_for_a_non_tree_mechanism_is_refused_before_noise(
        tmp_path, capsys, opendp_calls, mechanism, budget):
    f = _counts_file(tmp_path)
    assert main(["stream", "--counts", str(f), "--mechanism", mechanism, *budget,
                 "--estimator", "causal"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dptree-opt: error:") and "estimator" in err
    assert opendp_calls.count("drawn") == 0


def test_only_the_options_given_reach_the_counter(tmp_path, monkeypatch, capsys):
    seen = []
    real = stream_cmd.Counter

    def spy(*a, **kw):
        seen.append(kw)
        return real(*a, **kw)
    monkeypatch.setattr(stream_cmd, "Counter", spy)
    f = _counts_file(tmp_path)
    assert main(["stream", "--counts", str(f), "--rho", "1", "--mechanism", "sqrt",
                 "--seed", "0"]) == 0
    assert not {"branching", "estimator"} & set(seen[0])
    assert main(["stream", "--counts", str(f), "--epsilon", "1", "--mechanism", "kary",
                 "--branching", "3", "--seed", "0"]) == 0
    assert seen[1]["branching"] == 3 and "estimator" not in seen[1]


# ------------------------------------------------------------------ a bad line after the noise
_BAD_LINES = {   # the third line of a stream whose first two lines are released
    "exponent": b"1e3",
    "negative": b"-424242",
    "fraction": b"4242.5",
    "letters": b"x4242y",
    "hex": b"0x4242",
    "not ascii digits": "\u0664\u0662".encode(),
    "nan": b"nan",
    "count >= 2^53": b"98765432109876543",
    "too long": b"4" * 2000,
    "not UTF-8": b"\xff\xfe4242",
    # 2^51 + 12345 after 1 and 2^52 + 2^51: valid alone, the running count passes 2^53 (and
    # no noisy running count, near 1 or 1 + 2^52 + 2^51, can show it by chance)
    "running count reaches 2^53": b"2251799813697593",
}


def _bad_stream(kind: str) -> bytes:
    second = b"6755399441055744" if kind == "running count reaches 2^53" else b"5"
    return b"1\n" + second + b"\n" + _BAD_LINES[kind] + b"\n9\n"


@pytest.mark.parametrize("reader", ["descriptor", "readline"])
def test_a_bad_stdin_line_is_never_quoted_nor_described(tmp_path, monkeypatch, capsys,
                                                        opendp_calls, reader):
    """Steps 1 and 2 are released (secure noise) when line 3 turns out bad: whatever is wrong
    with it, every output (stdout, stderr, the JSON, the plot) says the same thing, and
    nothing of the line (or of a protected total) appears in any of them."""
    texts = []
    monkeypatch.setattr("dptree_opt.plotting.save_figure", lambda fig, path, **kw: texts.extend(
        t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text"))))
    stops = set()
    for i, (kind, bad) in enumerate(_BAD_LINES.items()):
        if reader == "readline" and kind == "not UTF-8":
            continue   # a text stream without a descriptor holds str
        data = _bad_stream(kind)
        out, png = tmp_path / f"{i}.json", tmp_path / f"{i}.png"
        texts.clear()
        drawn = opendp_calls.count("drawn")
        f = tmp_path / "in.txt"
        f.write_bytes(data)
        with open(f, encoding="utf-8") as stdin:
            monkeypatch.setattr("sys.stdin", stdin if reader == "descriptor" else _Stdin(
                data.decode("utf-8").splitlines(keepends=True)))
            assert main(["stream", "--counts", "-", "--horizon", "8", "--epsilon", "1",
                         "--out", str(out), "--plot", str(png)]) == 2, kind
        cap = capsys.readouterr()
        doc = json.loads(out.read_text())
        assert doc["status"] == "incomplete" and doc["steps"] == 2, kind
        assert opendp_calls.count("drawn") > drawn, kind    # the noise was drawn first
        assert doc["stopped"].startswith("standard input: line 3 is not a valid count (")
        stops.add(doc["stopped"])
        content = bad.decode("utf-8", errors="ignore").strip("-x y")[:40]
        for where, text in [("stdout", cap.out), ("stderr", cap.err), ("JSON", out.read_text()),
                            ("plot", "\n".join(texts))]:
            assert content not in text.replace(str(tmp_path), "<tmp>"), (kind, where)
            assert doc["stopped"] in text or where == "plot", (kind, where)
        assert texts and "INCOMPLETE" in "\n".join(texts)
    assert len(stops) == 1, stops   # one message, whatever the fault


def test_counts_file_and_stdin_follow_one_rule(tmp_path):
    """What a count line is: plain decimal digits, optionally '+', surrounding spaces, one
    pair of double quotes, a fraction of zeros; the same for a counts file (the stream's and
    the release's reader) and for standard input."""
    good = [b" 7.0 ", b"+3", b'"2"', b"007", b"5.", b"\t4\t", b"0", b"4503599627370496"]
    f = tmp_path / "good.txt"
    f.write_bytes(b"\n".join(good) + b"\n")
    want = [7, 3, 2, 7, 5, 4, 0, 2**52]
    assert stream_input.read_counts_file(str(f), 100, "x").tolist() == want
    assert rio.read_counts(str(f), None).tolist() == want
    assert [c for _, c in rio.count_lines(good, quote=False)] == want
    for bad in [b"1e3", b"7.5", b"-1", b"0x10", "\u0661".encode(), b"inf", b"1_000",
                b"9007199254740992", b"7 7", b"nan"]:
        f.write_bytes(b"1\n" + bad + b"\n")
        for read in (lambda: stream_input.read_counts_file(str(f), 100, "x"),
                     lambda: rio.read_counts(str(f), None),
                     lambda: list(rio.count_lines([b"1", bad], quote=False))):
            with pytest.raises(ValueError, match="line 2"):
                read()


def test_a_bad_counts_file_line_is_quoted_before_the_noise(tmp_path, capsys, opendp_calls):
    f = tmp_path / "c.txt"
    f.write_text("1\n2\n1e3\n")
    assert main(["stream", "--counts", str(f), "--epsilon", "1"]) == 2
    err = capsys.readouterr().err
    assert "line 3: '1e3' must be a non-negative integer" in err and "no exponent" in err
    assert opendp_calls.events == []


# ------------------------------------------------------------------ --quiet needs a sink
@pytest.mark.parametrize("source", ["counts", "stdin", "column"])
def test_quiet_without_out_or_plot_is_refused_before_anything(tmp_path, monkeypatch, capsys,
                                                              opendp_calls, source):
    stdin = _counts_stdin([1, 2, 3])
    monkeypatch.setattr("sys.stdin", stdin)
    argv = {"counts": ["--counts", str(_counts_file(tmp_path))],
            "stdin": ["--counts", "-", "--horizon", "3"],
            "column": [str(tmp_path / "not_read.csv"), "--column", "t", "--lower", "0",
                       "--upper", "1", "--steps", "4"]}[source]
    assert main(["stream", *argv, "--epsilon", "1", "--quiet"]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and cap.err.startswith("dptree-opt: error: --quiet without --out or "
                                                "--plot")
    assert "give --out" in cap.err and "drop --quiet" in cap.err
    assert opendp_calls.events == [] and stdin.chars == 0
    # with a sink it runs
    out = tmp_path / "r.json"
    assert main(["stream", "--counts", str(_counts_file(tmp_path)), "--epsilon", "1",
                 "--quiet", "--out", str(out)]) == 0
    assert capsys.readouterr().out == "" and json.loads(out.read_text())["steps"] == 6


# ------------------------------------------------------------------ messages name flags
# Python keyword arguments (horizon=None, estimator='causal') and options the CLI lacks
_PYTHON_NAMES = re.compile(r"\b(horizon|mechanism|estimator|branching|epsilon|rho|levels?|"
                           r"noise|split)=|buffers|objective|theta|omega|level_budgets")


@pytest.mark.parametrize("argv, match", [
    (["--epsilon", "1", "--mechanism", "kary"], "--mechanism kary needs --branching K"),
    (["--epsilon", "1", "--mechanism", "kary", "--unbounded"], "needs --branching K"),
    (["--epsilon", "1", "--mechanism", "kary", "--branching", "1"],
     "--branching must be an integer in 2..2\\^62 for --mechanism kary, got 1"),
    (["--epsilon", "1", "--mechanism", "kary", "--branching", str(2**63)], "2..2\\^62"),
    (["--epsilon", "1", "--branching", "3"],
     "--mechanism binary is the 2-ary tree: for --branching 3 use --mechanism kary"),
    (["--rho", "1", "--mechanism", "blt", "--branching", "3"],
     "--branching is for the tree mechanisms .* --mechanism blt takes none"),
    (["--rho", "1", "--mechanism", "blt", "--estimator", "causal"],
     "--estimator is for --mechanism binary or kary; --mechanism blt"),
    (["--epsilon", "1", "--mechanism", "tree_blue", "--estimator", "causal"],
     "--estimator is for"),
    (["--rho", "1", "--mechanism", "sqrt", "--unbounded"],
     "--unbounded needs --mechanism binary or kary"),
    (["--epsilon", "1", "--mechanism", "sqrt"], "give --rho, not --epsilon"),
    (["--epsilon", "1", "--mechanism", "tree_blue", "--branching", "1"],
     "--branching must be an integer in 2..2\\^62 for --mechanism tree_blue"),
    (["--epsilon", "1", "--mechanism", "negative_digits", "--branching", "4"],
     "--branching must be an odd integer"),
    (["--epsilon", "1", "--mechanism", "tree_blue", "--horizon", str(2**22 + 1)],
     (r"--horizon 4194305 \(--mechanism tree_blue\) is above the limit of 2\^22 = 4194304"
      r".*--estimator causal")),
    (["--rho", "1", "--mechanism", "sqrt", "--horizon", str(2**24 + 1)],
     r"\(--mechanism sqrt\) is above the limit of 2\^24 = 16777216.*--mechanism blt"),
    (["--epsilon", "1", "--rho", "1"], "exactly one of --epsilon .* or --rho"),
    (["--epsilon", "0"], "--epsilon must be finite and > 0"),
    (["--epsilon", "1e300", "--mechanism", "tree_blue"], r"the noise of the leaves \(level 0\)"),
])
def test_stream_flag_messages_name_flags(tmp_path, capsys, opendp_calls, argv, match):
    f = _counts_file(tmp_path)
    assert main(["stream", "--counts", str(f), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dptree-opt: error: ") and err.count("\n") == 1, err
    assert re.search(match, err), err
    assert not _PYTHON_NAMES.search(err), err
    assert opendp_calls.events == []


@pytest.mark.parametrize("mechanism, budget", [
    ("binary", "--epsilon"), ("negative_digits", "--epsilon"), ("sqrt", "--rho"),
    ("blt", "--rho"), ("tree_blue", "--epsilon")])
def test_out_is_written_before_the_first_step(tmp_path, monkeypatch, capsys, opendp_calls,
                                               mechanism, budget):
    """As the help says: --out is on disk (the account, no steps) before the first step is
    drawn; only tree_blue has drawn noise by then (all of it, ahead, added to no count
    yet)."""
    out, seen = tmp_path / "r.json", []

    def hook(i):
        if i == 0:   # the first line is read before the first step is drawn
            seen.append((json.loads(out.read_text()), opendp_calls.count("drawn")))
    monkeypatch.setattr("sys.stdin", _counts_stdin([4, 2, 5], hook=hook))
    assert main(["stream", "--counts", "-", "--horizon", "3", budget, "1", "--mechanism",
                 mechanism, "--out", str(out)]) == 0
    (first, drawn), = seen
    assert first["status"] == "running" and first["steps"] == 0 and not first["simulation"]
    assert first["account"]["budget"] == {budget.lstrip("-"): 1.0}
    assert (drawn > 0) == (mechanism == "tree_blue")
    final = json.loads(out.read_text())
    assert final["status"] == "complete"
    _same_steps(final, _steps(capsys.readouterr().out))
    assert "tree_blue`` draws all its" in stream_cmd.__doc__ or \
        "tree_blue draws all its" in stream_cmd.__doc__
