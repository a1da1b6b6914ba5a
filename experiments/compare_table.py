"""The table behind ``dptree-opt compare``: every mechanism's exact mean / max per-query error
on the CDF, identity and all-range workloads at K = 2^10 and 2^16, eps = 1.

Laplace, add/remove neighbours (N private), the setting of docs/math.md section 6, so the anchor
rows (binary covering 1210 / 4624, binary + OLS 298.9 / 1002.8, Google default 297.1 / 960.0,
OpenDP default 284.8 / 615.7 with noised padding) can be read off the table. Quick mode: K = 2^10
only, without OpenDP's own Monte Carlo run; full mode: both K and the OpenDP run (if installed).
"""

from __future__ import annotations

from pathlib import Path

from dptree_opt import compare

import _experiments as C  # experiments/_experiments.py (on sys.path: script dir / load_script)

NAME = "compare_table"
BINS = (2**10, 2**16)
QUICK_BINS = (2**10,)
EPSILON = 1.0
NEIGHBOURS = "add_remove"
NOISE = "laplace"
WORKLOADS = ("cdf", "identity", "all_range")
# --set NAME=VALUE on the command line (dptree-opt experiment compare_table --help)
PARAMETERS = {
    "K": {"type": "ints", "sets": ("BINS", "QUICK_BINS"), "min": 1, "help": "bins K"},
    "epsilon": {"type": "float", "sets": ("EPSILON",), "min": 1e-6,
                "help": "budget (eps; rho for Gaussian noise)"},
    "neighbours": {"type": "str", "sets": ("NEIGHBOURS",), "choices": ("add_remove", "swap"),
                   "help": "neighbour model"},
    "noise": {"type": "str", "sets": ("NOISE",), "choices": ("laplace", "gaussian"),
              "help": "noise"},
    "workloads": {"type": "strs", "sets": ("WORKLOADS",),
                  "choices": ("cdf", "identity", "all_range"), "help": "workloads compared"},
}


def run(out_dir: Path, quick: bool = True) -> dict:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tables = {}
    for K in (QUICK_BINS if quick else BINS):
        res = compare.compare(K, EPSILON, noise=NOISE, neighbours=NEIGHBOURS,
                              workloads=WORKLOADS, opendp=not quick)
        tables[str(K)] = compare.as_dict(res)
    C.write_json(tables, out_dir, NAME)
    C.style()
    fig, axes = C.plt.subplots(1, len(tables), figsize=(7.5 * len(tables), 6.8), squeeze=False)
    colors = {"cdf": "#1f77b4", "identity": "#2ca02c", "all_range": "#ff7f0e"}
    for ax, (K, tab) in zip(axes[0], tables.items()):
        rows = [r for r in tab["rows"] if r["available"]]
        height = 0.27
        for i, wl in enumerate(WORKLOADS):
            ys = [j + (i - 1) * height for j in range(len(rows))]
            vals = [r["errors"][wl]["mean"] for r in rows]
            vals = [v if v is not None else float("nan") for v in vals]
            ax.barh(ys, vals, height, color=colors[wl], label=f"{wl.replace('_', '-')} workload",
                    log=True)
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels([f"{r['label']} [{r['estimator']}]" for r in rows], fontsize=7.5)
        ax.invert_yaxis()
        ax.set_xlabel("mean per-query expected squared error (counts$^2$, log scale)")
        ax.set_title(f"K = 2^{int(K).bit_length() - 1} bins")
        ax.legend(fontsize=8, loc="lower right")
    C.caption(fig, f"dptree-opt compare: exact errors of every mechanism (Laplace, eps = "
                   f"{EPSILON:g}, add/remove neighbours, N private); missing bars: covering sums "
                   "answer prefixes only.")
    png = C.save_png(fig, out_dir, NAME, bottom=0.05)
    headline = {K: {r["key"]: r["errors"]["cdf"]["mean"] for r in tab["rows"] if r["available"]}
                for K, tab in tables.items()}
    return {"name": NAME, "png": str(png), "json": str(out_dir / f"{NAME}.json"),
            "cdf_mean": headline, "tables": tables}


if __name__ == "__main__":
    C.cli(run, NAME)
