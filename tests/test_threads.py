"""The command line's BLAS thread limit (dptree_opt/threads.py)."""

import subprocess
import sys

import pytest
from threadpoolctl import threadpool_info

from dptree_opt.threads import blas_threads, limited_blas


def _blas_counts():
    return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]


def test_default_is_one_thread_unless_the_user_chose():
    assert blas_threads({}) == 1
    assert blas_threads({"DPTREE_OPT_BLAS_THREADS": "3"}) == 3
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        assert blas_threads({name: "2"}) is None           # the library's own setting stands
    assert blas_threads({"OMP_NUM_THREADS": "", "X": "1"}) == 1   # empty: not a choice


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5", ""])
def test_bad_setting_refused_by_name(value):
    with pytest.raises(ValueError, match="DPTREE_OPT_BLAS_THREADS"):
        blas_threads({"DPTREE_OPT_BLAS_THREADS": value})


def test_limit_applies_inside_and_is_restored():
    before = _blas_counts()
    with limited_blas({}):
        assert all(n == 1 for n in _blas_counts())
    assert _blas_counts() == before
    with limited_blas({"OMP_NUM_THREADS": "4"}):
        assert _blas_counts() == before


def test_cli_refuses_a_bad_setting():
    code = "import sys; from dptree_opt.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.run([sys.executable, "-c", code, "engines", "--task", "error"],
                          capture_output=True, text=True, timeout=60,
                          env={"DPTREE_OPT_BLAS_THREADS": "zero", "PATH": ""})
    assert proc.returncode == 2
    assert "DPTREE_OPT_BLAS_THREADS must be an integer >= 1" in proc.stderr
