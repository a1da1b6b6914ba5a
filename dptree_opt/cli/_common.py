"""Shared pieces of the ``dptree-opt`` subcommands: strategy specs and budget flags."""

from __future__ import annotations

import argparse

import numpy as np

from .. import strategies

STRATEGY_HELP = ("histogram | prefix | binary | tree:K (one branching factor, e.g. tree:17) | "
                 "tree:K1,K2,... (per-level branching factors, root first, e.g. tree:4,8,32)")


def parse_strategy(spec: str, n_bins: int):
    """(strategy, padded bin count, note) for a --strategy spec.

    A tree:k whose k is not an integer root of n is padded to the next power of k (the
    extra bins are empty); a branching list must multiply to at least n."""
    spec = spec.strip().lower()
    if spec == "histogram":
        return strategies.histogram(n_bins), n_bins, None
    if spec in ("prefix", "prefix_sums", "range"):
        return strategies.prefix_sums(n_bins), n_bins, None
    if spec in ("binary", "binary_tree"):
        spec = "tree:2"
    if not spec.startswith("tree:"):
        raise ValueError(f"--strategy: unknown strategy {spec!r}; expected {STRATEGY_HELP}")
    try:
        ks = [int(k) for k in spec[5:].split(",")]
    except ValueError:
        raise ValueError(f"--strategy: cannot read branching factors in {spec!r}") from None
    if len(ks) == 1:
        k = ks[0]
        if k < 2:
            raise ValueError(f"--strategy: branching factor must be >= 2, got {k}")
        ks = [k] * strategies.padded_height(n_bins, k)
    padded = int(np.prod(ks, dtype=object)) if ks else 1
    if padded < n_bins:
        raise ValueError(f"--strategy: branching {ks} covers only {padded} < {n_bins} bins")
    note = None
    if padded != n_bins:
        note = (f"{n_bins} bins do not fit branching {ks}: padded to {padded} bins (the "
                f"{padded - n_bins} extra bins are empty); errors are over the {n_bins} real "
                "prefixes")
    return strategies.tree(padded, ks), padded, note


def budget_kwargs(args) -> dict:
    """{"epsilon": ...} or {"rho": ...} from --epsilon/--rho, checked against --noise (which
    defaults to gaussian when only --rho is given; ``args.noise`` is set to the noise used)."""
    from ..privacy import infer_noise

    args.noise = infer_noise(args.noise, args.epsilon, args.rho)
    if args.noise == "laplace":
        if args.epsilon is None or args.rho is not None:
            raise ValueError("--noise laplace needs --epsilon (and no --rho)")
        return {"epsilon": args.epsilon}
    if args.rho is None or args.epsilon is not None:
        raise ValueError("--noise gaussian needs --rho (zCDP; and no --epsilon)")
    return {"rho": args.rho}


def add_budget_arguments(parser: argparse.ArgumentParser) -> None:
    """--epsilon/--rho/--noise/--neighbours/--public-total, shared by every subcommand."""
    parser.add_argument("--epsilon", type=float, help="total eps (Laplace, pure eps-DP)")
    parser.add_argument("--rho", type=float, help="total rho (Gaussian, rho-zCDP)")
    parser.add_argument("--noise", choices=("laplace", "gaussian"), default=None,
                        help="default: gaussian with --rho alone, else laplace")
    parser.add_argument("--neighbours", choices=("swap", "add_remove"), default="swap",
                        help="swap: N public and invariant (default); add_remove: N private")
    parser.add_argument("--public-total", action="store_true",
                        help="under add_remove, declare N public (N is then not protected)")
