"""Predictor analysis (paper §4, Table 3): how well does each attack-free score rank robustness?

Robustness is measured by ΔES under the forget+retain attack (smaller is more robust). For each
predictor (FRAG with gamma 1, FRAG with gamma 0 = ``A_f``, ``A_r``, the global L2) the Spearman
rank correlation with ΔES is reported over *healthy* checkpoints, with a bootstrap confidence
interval: the number of checkpoints is small, and the interval shows how little a single rho
says. A predictor of robustness correlates *negatively* with ΔES.
"""
from __future__ import annotations

import functools
import re
from typing import Sequence

import numpy as np
import pandas as pd
from scipy import stats

PREDICTORS = ("FRAG_x100", "A_f_x100", "A_r_x100", "l2_all")


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho (average ranks for ties); NaN when either side is constant or n < 3."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) != len(y):
        raise ValueError(f"x and y differ in length ({len(x)} and {len(y)}).")
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    return float(stats.spearmanr(x, y).statistic)


def _clean(xs: Sequence[Sequence[float]], y: Sequence[float | Sequence[float]],
           groups: Sequence | None = None) -> tuple[list, list, int, list | None]:
    """The checkpoints every ``x`` of ``xs`` and at least one seed of ``y`` are finite on: the x
    arrays, the finite seeds of each, how many checkpoints were dropped, and their groups."""
    xs = [np.asarray(x, float) for x in xs]
    if any(len(x) != len(y) for x in xs) or groups is not None and len(groups) != len(y):
        raise ValueError(f"x, y and groups differ in length ({[len(x) for x in xs]}, {len(y)} and "
                         f"{None if groups is None else len(groups)}).")
    runs = [np.atleast_1d(np.asarray(v, float)) for v in y]
    runs = [v[np.isfinite(v)] for v in runs]
    keep = [i for i in range(len(y)) if all(np.isfinite(x[i]) for x in xs) and len(runs[i])]
    kept_groups = None if groups is None else [list(groups)[i] for i in keep]
    return [x[keep] for x in xs], [runs[i] for i in keep], len(y) - len(keep), kept_groups


@functools.lru_cache(maxsize=32)
def _draws(counts: tuple[int, ...], n_boot: int, seed: int, groups: tuple | None) -> tuple:
    """The bootstrap's resamples of checkpoints with ``counts`` seeds each, drawn at each level that
    varies: with ``groups`` (the method of each checkpoint), methods with replacement, then within
    each drawn method its checkpoints with replacement; without, checkpoints with replacement. Then,
    for each drawn checkpoint, its seeds with replacement. The draws depend on the counts only, so
    every predictor scored on the same checkpoints sees the same resamples (paired), drawn once.

    Returns:
        ``(sizes, idx, seeds, parts)``, read-only: the checkpoints drawn by each resample
        (``sizes[b]`` of them, concatenated in ``idx``); for each drawn checkpoint its drawn seeds,
        as positions in the seeds' values concatenated in checkpoint order, in ascending order (the
        same seeds drawn in another order are the same mean), padded with the position one past
        the end; and per resample the positions of each drawn method (a method drawn twice is two
        strata; without ``groups``, one stratum).
    """
    rng = np.random.default_rng(seed)
    n, offsets = len(counts), np.concatenate([[0], np.cumsum(counts, dtype=int)])
    members = None if groups is None else [np.flatnonzero(np.asarray(groups) == g) for g in dict.fromkeys(groups)]
    sizes, idxs, rows, parts_all = [], [], [], []
    for _ in range(n_boot):
        if members is None:
            idx, parts = rng.integers(0, n, n), [np.arange(n)]
        else:
            drawn = [members[k] for k in rng.integers(0, len(members), len(members))]
            picks = [m[rng.integers(0, len(m), len(m))] for m in drawn]
            idx = np.concatenate(picks)
            ends = np.cumsum([len(m) for m in picks])
            parts = [np.arange(e - len(m), e) for m, e in zip(picks, ends)]
        for i in idx:
            k = counts[i]
            rows.append(offsets[i] + (np.sort(rng.integers(0, k, k)) if k > 1 else np.zeros(1, int)))
        sizes.append(len(idx)), idxs.append(idx), parts_all.append(parts)
    seeds = np.full((len(rows), max(counts, default=1)), offsets[-1])
    for r, row in enumerate(rows):
        seeds[r, :len(row)] = row
    out = np.asarray(sizes, int), np.concatenate(idxs) if idxs else np.zeros(0, int), seeds
    for a in out:
        a.setflags(write=False)
    return (*out, parts_all)


def _rows_spearman(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman's ρ of each row of ``x`` with the same row of ``y`` (``[rows, n]``; a 1-D ``x`` is
    every row's), as :func:`spearman` gives it row by row (average ranks for ties; NaN for a
    constant row or n < 3), in one pass."""
    x = np.broadcast_to(x, y.shape)
    if x.shape[1] < 3:
        return np.full(len(x), np.nan)
    rx, ry = stats.rankdata(x, axis=1), stats.rankdata(y, axis=1)
    rx, ry = rx - rx.mean(axis=1, keepdims=True), ry - ry.mean(axis=1, keepdims=True)
    norm = np.sqrt((rx ** 2).sum(axis=1) * (ry ** 2).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(norm > 0, (rx * ry).sum(axis=1) / norm, np.nan)


def _resampled(runs: list, n_boot: int, seed: int, groups: Sequence | None) -> tuple:
    """The resamples of :func:`_draws` for these checkpoints: per resample its drawn checkpoints,
    their seed means (each the sum of its drawn seeds in ascending order over their number, so that
    equal seeds are an equal mean), and its strata."""
    if not isinstance(seed, (int, np.integer)):
        raise ValueError(f"seed must be an integer (the resamples are drawn once per seed); got {seed!r}.")
    sizes, idx, seeds, parts = _draws(tuple(len(v) for v in runs), n_boot, int(seed),
                                      None if groups is None else tuple(groups))
    flat = np.concatenate([*runs, [0.0]])  # the padding position reads the 0 at the end
    values = flat[seeds]
    ys = values[:, 0].copy()
    for j in range(1, values.shape[1]):
        ys += values[:, j]
    return sizes, idx, ys / np.maximum((seeds < len(flat) - 1).sum(axis=1), 1), parts


def _boot_rhos(xs: list[np.ndarray], runs: list, n_boot: int, seed: int, groups: Sequence | None) -> np.ndarray:
    """ρ of each of ``xs`` with ΔES in every resample (``[len(xs), n_boot]``, NaN where a side is
    constant), the resamples of the same length scored together."""
    sizes, idx, ys, _ = _resampled(runs, n_boot, seed, groups)
    starts = np.cumsum(sizes) - sizes
    out = np.full((len(xs), n_boot), np.nan)
    for m in np.unique(sizes):
        which = np.flatnonzero(sizes == m)
        pos = starts[which][:, None] + np.arange(m)
        for k, x in enumerate(xs):
            out[k, which] = _rows_spearman(x[idx[pos]], ys[pos])
    return out


def _interval(draws: list, level: float) -> tuple[float, float, int]:
    draws = np.asarray(draws, float)
    ok = draws[~np.isnan(draws)]
    tail = (1 - level) / 2
    low, high = (np.quantile(ok, [tail, 1 - tail]) if len(ok) else (np.nan, np.nan))
    return float(low), float(high), int(len(draws) - len(ok))


def _check_boot(n_boot: int, level: float) -> None:
    if n_boot < 1 or not 0 < level < 1:
        raise ValueError(f"n_boot must be >= 1 and level in (0, 1); got {n_boot}, {level}.")


def bootstrap_spearman(x: Sequence[float], y: Sequence[float | Sequence[float]], n_boot: int = 2000,
                       level: float = 0.95, seed: int = 0, groups: Sequence | None = None) -> dict:
    """Spearman's rho with a percentile bootstrap interval over resampled checkpoints.

    ``y[i]`` is one number, or the numbers of checkpoint ``i`` under several attack seeds. Rho is
    taken against each checkpoint's mean over its seeds; each resample draws checkpoints with
    replacement and, within each drawn checkpoint, its seeds with replacement, so the interval
    carries both the choice of checkpoints and the seed noise (with one seed per checkpoint it is
    the plain pairs bootstrap). With ``groups`` (each checkpoint's method), methods are drawn first
    and checkpoints within each drawn method (:func:`_draws`): checkpoints of one method are not
    independent draws, and the interval then carries the choice of methods too. Checkpoints whose
    ``x`` or every ``y`` is not finite are dropped first (``n_dropped``); so are a checkpoint's
    non-finite seeds. Resamples in which either side is constant have no rho and are left out;
    their number is returned as ``n_degenerate``.

    Returns:
        ``{"rho", "low", "high", "n", "n_groups", "n_seeds", "n_boot", "n_degenerate", "n_dropped"}``
        (``n_seeds``: the seeds per checkpoint, as a list; ``n_groups``: methods, or ``n``).
    Raises:
        ValueError: lengths differ, ``n_boot < 1`` or ``level`` outside (0, 1).
    """
    _check_boot(n_boot, level)
    (x,), runs, n_dropped, groups = _clean([x], y, groups)  # rho and its interval describe the same checkpoints
    rho = spearman(x, [v.mean() for v in runs])
    low, high, degenerate = _interval(_boot_rhos([x], runs, n_boot, seed, groups)[0], level)
    return {"rho": rho, "low": low, "high": high, "n": len(x),
            "n_groups": len(x) if groups is None else len(set(groups)), "n_seeds": [len(v) for v in runs],
            "n_boot": n_boot, "n_degenerate": degenerate, "n_dropped": n_dropped}


def bootstrap_spearman_gap(x_a: Sequence[float], x_b: Sequence[float], y: Sequence[float | Sequence[float]],
                           n_boot: int = 2000, level: float = 0.95, seed: int = 0,
                           groups: Sequence | None = None) -> dict:
    """ρ(x_b, ΔES) − ρ(x_a, ΔES) with a percentile interval from paired resamples (the same
    checkpoints and seeds for both predictors, as :func:`bootstrap_spearman` draws them), over the
    checkpoints both predictors are finite on: whether one predictor ranks robustness better than
    another, which two separate intervals cannot say. ``groups`` as in :func:`bootstrap_spearman`.

    Returns:
        ``{"gap", "low", "high", "n", "n_degenerate", "n_dropped"}``.
    """
    _check_boot(n_boot, level)
    (a, b), runs, n_dropped, groups = _clean([x_a, x_b], y, groups)
    means = [v.mean() for v in runs]
    gap = spearman(b, means) - spearman(a, means)
    rho_a, rho_b = _boot_rhos([a, b], runs, n_boot, seed, groups)
    low, high, degenerate = _interval(rho_b - rho_a, level)
    return {"gap": gap, "low": low, "high": high, "n": len(runs), "n_degenerate": degenerate, "n_dropped": n_dropped}


@functools.lru_cache(maxsize=32)
def _permutations(n: int, n_perm: int, seed: int, strata: tuple[tuple[int, ...], ...] | None = None):
    """``(orders, exact)``: every reordering of ``n`` items (within each stratum, where given) when
    there are at most ``n_perm`` of them, else ``n_perm`` random ones (the observed order among them),
    as an ``[orders, n]`` array; drawn once for every predictor scored on the same checkpoints."""
    import itertools
    import math

    strata = [np.asarray(s) for s in strata] if strata else [np.arange(n)]
    count = math.prod(math.factorial(len(s)) for s in strata)
    if count <= n_perm:
        orders = []
        for combo in itertools.product(*(itertools.permutations(s) for s in strata)):
            order = np.arange(n)
            for s, p in zip(strata, combo):
                order[s] = p
            orders.append(order)
        return np.asarray(orders), True
    rng = np.random.default_rng(seed)
    orders = np.tile(np.arange(n), (n_perm, 1))
    for row in orders:
        for s in strata:
            row[s] = rng.permutation(s)
    return orders, False


def _stratified(x: np.ndarray, ys: np.ndarray, groups: list[np.ndarray]) -> np.ndarray:
    """The within-group ρ of ``x`` with each row of ``ys`` (``[rows, n]``; a 1-D ``ys`` is one row),
    averaged over groups weighted by their sizes; groups of fewer than 3 checkpoints or constant on
    either side carry no ρ and are left out (NaN where none is left)."""
    ys = np.atleast_2d(ys)
    total, weight = np.zeros(len(ys)), np.zeros(len(ys))
    for g in groups:
        if len(g) < 3:
            continue
        r = _rows_spearman(x[g], ys[:, g])
        ok = np.isfinite(r)
        total[ok] += len(g) * r[ok]
        weight[ok] += len(g)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(weight > 0, total / weight, np.nan)


def _p_value(observed: float, null: Sequence[float], exact: bool) -> float:
    """Two-sided: the share of the null at least as far from 0 as ``observed`` (for random
    reorderings, (k + 1) / (N + 1), counting the observed order once). A tiny tolerance keeps
    ties of floating-point rank sums from being lost."""
    null = np.abs(np.asarray(null, float)[~np.isnan(null)])
    k = int((null >= abs(observed) - 1e-12).sum())
    return k / len(null) if exact else (k + 1) / (len(null) + 1)


def permutation_spearman(x: Sequence[float], y: Sequence[float | Sequence[float]], n_perm: int = 20000,
                         seed: int = 0, strata: Sequence | None = None) -> dict:
    """Two-sided permutation p-value of Spearman's ρ(x, y) (``y`` per checkpoint, or a list of
    seeds averaged), by every reordering of ``y`` where there are at most ``n_perm`` (exact), else
    ``n_perm`` random ones. With ``strata`` (each checkpoint's method) ``y`` is reordered only
    within a method: the null of :func:`stratified_spearman`. Reordering across every checkpoint
    takes them as exchangeable under the null, which checkpoints of one method are not: read a
    pooled p-value beside the interval that resamples methods, not in its place.

    Returns:
        ``{"rho", "p", "n", "n_perm", "exact"}`` (``rho``: pooled, or stratified with ``strata``).
    """
    (x,), runs, _, strata = _clean([x], y, strata)
    ys = np.array([v.mean() for v in runs])
    groups = None if strata is None else [np.flatnonzero(np.asarray(strata) == g) for g in dict.fromkeys(strata)]
    rho = spearman(x, ys) if groups is None else float(_stratified(x, ys, groups)[0])
    orders, exact = _permutations(len(x), n_perm, seed, None if groups is None else tuple(map(tuple, groups)))
    if not np.isfinite(rho):
        return {"rho": rho, "p": np.nan, "n": len(x), "n_perm": len(orders), "exact": exact}
    permuted = ys[orders]
    null = _rows_spearman(x, permuted) if groups is None else _stratified(x, permuted, groups)
    return {"rho": rho, "p": _p_value(rho, null, exact), "n": len(x), "n_perm": len(orders), "exact": exact}


def permutation_spearman_gap(x_a: Sequence[float], x_b: Sequence[float], y: Sequence[float | Sequence[float]],
                             n_perm: int = 20000, seed: int = 0) -> dict:
    """Two-sided permutation p-value of ρ(x_b, y) − ρ(x_a, y): under the null that the two
    predictors rank robustness equally well, a checkpoint's rank under one is as likely to be its
    rank under the other, so the two ranks are swapped within each checkpoint, every one of the
    2^n ways where there are at most ``n_perm`` (exact), else ``n_perm`` random ones.

    Returns:
        ``{"gap", "p", "n", "n_perm", "exact"}``.
    """
    import itertools

    (a, b), runs, _, _ = _clean([x_a, x_b], y)
    ys = np.array([v.mean() for v in runs])
    ra, rb = stats.rankdata(a), stats.rankdata(b)
    gap = spearman(rb, ys) - spearman(ra, ys)
    n = len(ys)
    if 2 ** n <= n_perm:
        flips, exact = np.array(list(itertools.product((False, True), repeat=n)), bool).reshape(-1, n), True
    else:
        flips, exact = np.random.default_rng(seed).random((n_perm, n)) < 0.5, False
    # ρ(y, x') for each row x' of a matrix: the same Pearson-of-ranks with y in the role of x
    null = _rows_spearman(ys, np.where(flips, ra, rb)) - _rows_spearman(ys, np.where(flips, rb, ra))
    return {"gap": gap, "p": _p_value(gap, null, exact) if np.isfinite(gap) else np.nan, "n": n,
            "n_perm": len(null), "exact": exact}


def _within_draws(x: np.ndarray, yb: np.ndarray, sizes: np.ndarray, idx: np.ndarray, parts: list,
                  cell: np.ndarray) -> np.ndarray:
    """The stratified ρ of every resample at once: :func:`_stratified` of each resample's drawn
    checkpoints, its strata each drawn method's checkpoints of one cell (in the order the method
    drew them, the cells in order of first appearance), as the loop over resamples gives it, bit
    for bit: the strata's ρ scored together by size, then summed per resample in the same order."""
    n_boot = len(sizes)
    draw = np.repeat(np.arange(n_boot), sizes)
    # each drawn method is a run of consecutive positions: number them over all resamples
    lengths = np.fromiter((len(q) for p in parts for q in p), int)
    part = np.repeat(np.arange(len(lengths)), lengths)
    key = part * (int(cell.max(initial=0)) + 1) + cell[idx]
    _, first, inverse, counts = np.unique(key, return_index=True, return_inverse=True, return_counts=True)
    order = np.lexsort((np.arange(len(key)), first[inverse]))  # strata in drawing order, members in order
    in_order = np.argsort(first)
    starts, size = first[in_order], counts[in_order]  # each stratum's first position and size, in drawing order
    offsets = np.cumsum(size) - size
    rho = np.full(len(size), np.nan)
    for m in np.unique(size[size >= 3]):
        which = np.flatnonzero(size == m)
        pos = order[offsets[which][:, None] + np.arange(m)]
        rho[which] = _rows_spearman(x[idx[pos]], yb[pos])
    stratum_draw = draw[starts]
    rank = np.arange(len(size)) - np.searchsorted(stratum_draw, stratum_draw)
    total, weight = np.zeros(n_boot), np.zeros(n_boot)
    for j in range(int(rank.max(initial=-1)) + 1):
        at = rank == j
        ok = np.isfinite(rho[at])  # a stratum of fewer than 3 has no ρ (NaN)
        b = stratum_draw[at][ok]
        total[b] += size[at][ok] * rho[at][ok]
        weight[b] += size[at][ok]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(weight > 0, total / weight, np.nan)


def stratified_spearman(x: Sequence[float], y: Sequence[float | Sequence[float]], groups: Sequence,
                        n_boot: int = 2000, level: float = 0.95, seed: int = 0,
                        cells: Sequence | None = None) -> dict:
    """The within-method rank correlation: Spearman's ρ of ``x`` with ``y`` among the checkpoints of
    each method (its strengths), averaged over methods weighted by their checkpoints. It asks
    whether, within one method, the stronger updates that a predictor scores higher recover less;
    differences between methods do not enter it, so it is where more checkpoints per method buy
    power (the pooled ρ's interval stays wide with few methods however many checkpoints each has).
    The interval resamples methods, checkpoints within each and seeds within each (:func:`_draws`).

    ``cells`` (one label per checkpoint, finer than its method: the method on one forget split)
    takes the ρ within each cell instead, since ΔES on two forget sets are not one scale, while the
    interval still draws methods whole: a method's cells are not independent draws.

    Returns:
        ``{"rho", "low", "high", "n", "n_groups", "per_group": {cell: (rho, n)}, "n_degenerate"}``;
        cells of fewer than 3 checkpoints carry no ρ and count in ``n`` but not in ``rho``.
    """
    _check_boot(n_boot, level)
    cells = list(groups) if cells is None else list(cells)
    if len(cells) != len(groups):
        raise ValueError(f"cells and groups differ in length ({len(cells)} and {len(groups)}).")
    codes = {c: k for k, c in enumerate(dict.fromkeys(cells))}
    (x,), runs, _, keyed = _clean([x], y, [(g, codes[c]) for g, c in zip(groups, cells)])
    groups, cell = [g for g, _ in keyed], np.array([c for _, c in keyed], int)
    labels = [c for c in codes if codes[c] in set(cell)]
    members = [np.flatnonzero(cell == codes[c]) for c in labels]
    ys = np.array([v.mean() for v in runs])
    rho = float(_stratified(x, ys, members)[0])
    sizes, idx, yb, parts = _resampled(runs, n_boot, seed, groups)
    low, high, degenerate = _interval(_within_draws(x, yb, sizes, idx, parts, cell), level)
    return {"rho": rho, "low": low, "high": high, "n": len(x), "n_groups": len(set(groups)),
            "per_group": {c: (spearman(x[m], ys[m]), len(m)) for c, m in zip(labels, members)},
            "n_degenerate": degenerate}


def healthy(df: pd.DataFrame, min_utility_fraction: float = 0.5) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Split checkpoints into healthy and excluded ones.

    Excluded: noise controls (``kind == "noise"``) and collapsed models, whose Model Utility
    before the attack is below ``min_utility_fraction`` times the target's.

    Args:
        df: one row per checkpoint with ``model_utility_before``, ``target_model_utility`` and
            optionally ``kind``.
    Returns:
        ``(healthy, excluded)``, the latter with a ``reason`` column.
    """
    missing = {"model_utility_before", "target_model_utility"} - set(df.columns)
    if missing:
        raise ValueError(f"healthy() needs columns {sorted(missing)}.")
    noise = df["kind"].eq("noise") if "kind" in df else pd.Series(False, index=df.index)
    collapsed = df["model_utility_before"] < min_utility_fraction * df["target_model_utility"]
    reason = np.where(noise, "noise control",
                      np.where(collapsed, f"Model Utility below {min_utility_fraction:g} x target's", ""))
    excluded = df[noise | collapsed].assign(reason=reason[(noise | collapsed).to_numpy()])
    return df[~(noise | collapsed)], excluded


# the column that names a checkpoint's method for the intervals: the model label (FRP's two vetoes
# are two methods), resampled as one unit because its checkpoints share a recipe and a target
GROUP_BY = "model"


def predictor_table(df: pd.DataFrame, subsets: dict[str, pd.Series] | None = None,
                    predictors: Sequence[str] = PREDICTORS, target: str = "delta_es", n_boot: int = 2000,
                    seed: int = 0, group_by: str | None = GROUP_BY, n_perm: int = 20000) -> pd.DataFrame:
    """Spearman rho (with bootstrap interval and permutation p-value) of each predictor against
    ``target``, per subset.

    Args:
        subsets: name -> boolean mask over ``df`` rows (default: ``{"all": every row}``).
        group_by: the column naming each checkpoint's method: the interval resamples methods, then
            checkpoints within each, then seeds (:func:`bootstrap_spearman`); ``None`` resamples
            checkpoints as if independent (and so does a ``df`` without that column).
    Returns:
        One row per (subset, predictor): ``subset, predictor, n`` (checkpoints), ``methods``,
        ``attacks`` (attack runs behind them: more than ``n`` where a checkpoint's ``target`` is a
        list of seeds), ``rho, low, high, p_perm`` (:func:`permutation_spearman`, across
        checkpoints), ``resampled`` (what the interval resamples), ``degenerate_resamples``
        (resamples without a rho, left out of the interval).
    """
    subsets = subsets or {"all": pd.Series(True, index=df.index)}
    grouped = group_by is not None and group_by in df
    rows = []
    for name, mask in subsets.items():
        part = df[mask]
        groups = list(part[group_by]) if grouped else None
        for p in predictors:
            res = bootstrap_spearman(part[p], part[target], n_boot=n_boot, seed=seed, groups=groups)
            perm = permutation_spearman(part[p], part[target], n_perm=n_perm, seed=seed) if res["n"] >= 3 else {}
            rows.append({"subset": name, "predictor": p, "n": res["n"], "methods": res["n_groups"],
                         "attacks": sum(res["n_seeds"]), "rho": res["rho"], "low": res["low"], "high": res["high"],
                         "p_perm": perm.get("p", np.nan),
                         "resampled": "methods, checkpoints, seeds" if grouped else "checkpoints, seeds",
                         "degenerate_resamples": res["n_degenerate"]})
    return pd.DataFrame(rows)


# The paper's Table 3 (the authors' analysis/table3_spearman.py): a fixed method list, one
# checkpoint per method and forget split at its main setting, the forget+retain attack. GA is left
# out by name as collapsed; no utility rule. Columns: all, and without FRP.
PAPER_TABLE3_METHODS = ("graddiff", "npo", "rmu", "sp", "frp")
PAPER_TABLE3_PREDICTORS = ("l2_all", "FRAG_x100", "A_f_x100", "A_r_x100")


def paper_table3_checkpoints(df: pd.DataFrame, main_runs: set[str],
                             methods: Sequence[str] = PAPER_TABLE3_METHODS) -> pd.DataFrame:
    """The checkpoints of the paper's Table 3: rows of ``df`` whose ``unlearned_run`` is one of the
    ``main_runs`` (each method's main setting) and whose method is in ``methods``.

    Args:
        df: one row per attacked checkpoint with ``method``, ``forget_split``, ``unlearned_run``.
        main_runs: the notebook-05 run names that are the main settings, on every split.
    Returns:
        The selected rows, sorted by method and split.
    Raises:
        ValueError: two main checkpoints for one (method, split) (the main settings are ambiguous).
    """
    chosen = df[df.method.isin(methods) & df.unlearned_run.isin(main_runs)]
    twice = chosen.groupby(["method", "forget_split"]).size()
    if (twice > 1).any():
        raise ValueError(f"More than one main checkpoint for {list(twice[twice > 1].index)}: name one run per "
                         "method and split as its main setting.")
    order = {m: i for i, m in enumerate(methods)}
    return chosen.assign(_o=chosen.method.map(order)).sort_values(["_o", "forget_split"]).drop(columns="_o")


def paper_table3_subsets(chosen: pd.DataFrame) -> dict[str, pd.Series]:
    """Table 3's two columns as masks over its checkpoints: "all", and "w/o FRP"."""
    return {"all": chosen.method.ne(""), "w/o FRP": chosen.method.ne("frp")}


def paper_table3(chosen: pd.DataFrame, predictors: Sequence[str] = PAPER_TABLE3_PREDICTORS,
                 n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Spearman rho of each predictor with ΔES over the Table 3 checkpoints, "all" and "w/o FRP",
    with bootstrap intervals (one row per predictor and subset)."""
    return predictor_table(chosen, paper_table3_subsets(chosen), predictors=predictors, n_boot=n_boot, seed=seed)


AUTHORS_TABLE3 = ("scale", "subset", "predictor", "rho", "n", "source")


def authors_table3() -> pd.DataFrame:
    """The authors' Table 3 as their paper and repository give it (``data/reference/authors_table3.csv``).

    Returns:
        One row per scale (``1B``, ``3B``, ``pooled``), subset (``all``, ``w/o FRP``), predictor
        (``l2``, ``frag_gap``, ``cos_f``, ``cos_r``, ``frag_printed``) and source: ``rho``, ``n``,
        ``source`` (``data/reference/README.md`` names each).
    """
    from ..paths import DATA_DIR

    table = pd.read_csv(DATA_DIR / "reference" / "authors_table3.csv")
    if tuple(table.columns) != AUTHORS_TABLE3:
        raise ValueError(f"authors_table3.csv has columns {list(table.columns)}, expected {list(AUTHORS_TABLE3)}.")
    return table


# this repository's predictor columns -> the authors' names for the same quantity
AUTHORS_PREDICTOR = {"l2_all": "l2", "FRAG_x100": "frag_gap", "A_f_x100": "cos_f", "A_r_x100": "cos_r"}


def table3_beside_authors(ours: pd.DataFrame) -> pd.DataFrame:
    """:func:`paper_table3` with the authors' values beside each row: their own recomputation from
    their checkpoints per scale and pooled (``authors_1B``, ``authors_3B``, ``authors_pooled``; from
    ``docs/REPRODUCE.md``, else ``results/table3_spearman.csv``), and the pooled value printed in the
    paper's Table 3 (``paper_printed``; its FRAG column is cos F alone, so it stands in the FRAG row).
    """
    authors = authors_table3()
    recomputed = authors[~authors.source.str.startswith("paper")].drop_duplicates(["scale", "subset", "predictor"])
    printed = authors[authors.source.str.startswith("paper") & authors.scale.eq("pooled")]
    printed = printed.assign(predictor=printed.predictor.replace({"frag_printed": "frag_gap"}))
    out = ours.copy()
    name = out.predictor.map(AUTHORS_PREDICTOR)
    for scale in ("1B", "3B", "pooled"):
        values = recomputed[recomputed.scale.eq(scale)].set_index(["subset", "predictor"]).rho
        out[f"authors_{scale}"] = [values.get((s, p), float("nan")) for s, p in zip(out.subset, name)]
    values = printed.set_index(["subset", "predictor"]).rho
    out["paper_printed"] = [values.get((s, p), float("nan")) for s, p in zip(out.subset, name)]
    return out


def _verdict(low: float, high: float, above: str, below: str) -> str:
    if not (np.isfinite(low) and np.isfinite(high)):
        return "not measured yet"
    if high < 0:
        return f"{below} with 95 % confidence"
    if low > 0:
        return f"{above} with 95 % confidence"
    return "not resolved: the interval includes 0"


# below this many methods an interval that resamples methods is nominal: a cluster bootstrap over few
# clusters covers less than its level (a verdict "with 95 % confidence" says so)
FEW_METHODS = 10
# Table 3's checkpoints in the paper's protocol: 5 methods x 3 splits, 4 x 3 without FRP
PLANNED_CHECKPOINTS = {"all": 15, "w/o FRP": 12}


def claims(table3: pd.DataFrame, checkpoints: pd.DataFrame, weights: str = "bf16", n_boot: int = 2000,
           planned: dict[str, int] | None = None) -> pd.DataFrame:
    """The paper's Table 3 claims one per row, from this repository's Table 3 of one precision
    (:meth:`frag_utils.report.collect.Collection.table1`'s ``table3_by_precision`` and its checkpoints,
    ``delta_es`` a list of seeds each): what the paper prints at 1B, what the authors' recomputation
    from their checkpoints gives at 1B (their ``docs/REPRODUCE.md``), this repository's ρ with its
    interval, and a verdict read off the interval alone, never set by hand.

    The FRAG rows are the Eq. 5 gap (the paper's printed FRAG column is cos(F, ΔW²) alone, its own
    row here, beside the printed value). The L2 rows ask whether L2 ranks robustness worse than
    FRAG: their interval is of ρ(L2) − ρ(FRAG) over paired resamples
    (:func:`bootstrap_spearman_gap`), and the claim is supported only where FRAG's own ρ is negative
    too (L2 above a FRAG that does not predict robustness is not FRAG predicting it better); an L2
    whose own ρ is positive is said to rank in reverse. No verdict is given before every checkpoint the paper's
    protocol plans (``planned``, default :data:`PLANNED_CHECKPOINTS`) is recorded.
    """
    planned = planned or PLANNED_CHECKPOINTS
    authors = authors_table3()
    at_1b = authors[authors.scale.eq("1B")]
    printed = at_1b[at_1b.source.str.startswith("paper")].set_index(["subset", "predictor"]).rho
    recomputed = at_1b[~at_1b.source.str.startswith("paper")].drop_duplicates(["subset", "predictor"])
    recomputed = recomputed.set_index(["subset", "predictor"]).rho
    ours = table3[table3.weights.eq(weights)].set_index(["subset", "predictor"]) if len(table3) else None
    cps = checkpoints[checkpoints.weights.eq(weights)] if len(checkpoints) else checkpoints
    specs = [("FRAG (Eq. 5 gap) correlates negatively with ΔES", "all", "FRAG_x100", "frag_printed"),
             ("the same without FRP", "w/o FRP", "FRAG_x100", "frag_printed"),
             ("cos(F, ΔW²) alone, what the printed FRAG column tracks, correlates negatively", "all", "A_f_x100",
              "frag_printed"),
             ("global L2 ranks robustness worse than FRAG (the ρ are L2's; the verdict, ρ(L2) − ρ(FRAG))", "all",
              "l2_all", "l2"),
             ("the same without FRP", "w/o FRP", "l2_all", "l2")]
    rows = []
    for claim, subset, predictor, paper_name in specs:
        r = ours.loc[(subset, predictor)] if ours is not None and (subset, predictor) in ours.index else None
        rho, low, high, n = (r.rho, r.low, r.high, int(r.n)) if r is not None else (np.nan, np.nan, np.nan, 0)
        attacks = int(r.attacks) if r is not None else 0
        verdict = _verdict(low, high, "reversed: ρ > 0", "supported: ρ < 0")
        if predictor == "l2_all":
            part = cps[paper_table3_subsets(cps)[subset]] if len(cps) else cps
            groups = list(part[GROUP_BY]) if len(part) and GROUP_BY in part else None
            gap = {"gap": np.nan, "low": np.nan, "high": np.nan}
            if len(part):
                gap = bootstrap_spearman_gap(part.FRAG_x100, part.l2_all, list(part.delta_es), n_boot=n_boot,
                                             groups=groups)
            verdict = _verdict(gap["low"], gap["high"], "supported: ρ(L2) > ρ(FRAG)", "reversed: ρ(L2) < ρ(FRAG)")
            frag = ours.loc[(subset, "FRAG_x100")] if ours is not None and (subset, "FRAG_x100") in ours.index else None
            if verdict.startswith("supported") and frag is not None and not frag.high < 0:
                # FRAG beating L2 means a negative FRAG ρ with L2's above it, not only L2's above FRAG's
                verdict = ("not supported as the paper means it: ρ(L2) > ρ(FRAG) with 95 % confidence, but FRAG's "
                           f"own ρ is not negative ({frag.rho:+.2f} [{frag.low:+.2f}, {frag.high:+.2f}])")
            if np.isfinite(gap["gap"]):
                verdict += f" (ρ(L2) − ρ(FRAG) {gap['gap']:+.2f} [{gap['low']:+.2f}, {gap['high']:+.2f}])"
            if low > 0:
                verdict += "; L2 ranks in reverse with 95 % confidence: the larger updates recovered more"
        methods = int(r.methods) if r is not None and "methods" in r and pd.notna(r.methods) else n
        if "95 %" in verdict and methods < FEW_METHODS:
            verdict += (f" (nominal: the interval resamples {methods} methods, and a bootstrap over so few clusters "
                        "covers less than it says)")
        if n < planned.get(subset, 0) and verdict != "not measured yet":
            verdict = f"no verdict yet: {n} of {planned[subset]} checkpoints recorded"
        rows.append({"claim": claim, "subset": subset, "predictor": predictor,
                     "paper_1B": printed.get((subset, paper_name), np.nan),
                     "authors_recomputed_1B": recomputed.get((subset, AUTHORS_PREDICTOR[predictor]), np.nan),
                     f"ours_{weights}": rho, "low": low, "high": high, "n": n, "attacks": attacks, "verdict": verdict,
                     "what_follows": _what_follows(predictor, verdict)})
    return pd.DataFrame(rows)


def beside(claims_: pd.DataFrame, other: pd.DataFrame) -> pd.DataFrame:
    """``claims_`` (:func:`claims` of one precision) with the same claims measured in another
    precision (``other``, :func:`claims` row for row) in one column more, ``ours_<weights>``: its
    ρ with interval, ``n`` and the first words of its verdict, in one cell; on the L2 rows, whose
    verdict is on ρ(L2) − ρ(FRAG), that difference with its interval too, and whether L2's own ρ
    is reversed."""
    weights = next(c for c in other.columns if c.startswith("ours_"))
    if weights in claims_.columns:
        raise ValueError(f"both claims tables have {weights}: pass the claims of two precisions")
    keys = ["claim", "subset", "predictor"]
    if not other[keys].reset_index(drop=True).equals(claims_[keys].reset_index(drop=True)):
        raise ValueError("the two claims tables differ in their rows: pass two outputs of analysis.claims")

    def cell(r: pd.Series) -> str:
        if not r.n:
            return r.verdict
        text = f"{r[weights]:+.2f} [{r.low:+.2f}, {r.high:+.2f}], n {int(r.n)}: {r.verdict.split(':')[0]}"
        gap = re.search(r"\(ρ\(L2\) − ρ\(FRAG\) [^)]*\)", r.verdict)
        reversed_ = "; L2 in reverse" if "L2 ranks in reverse" in r.verdict else ""
        return text + (f" {gap.group(0)}" if gap else "") + reversed_
    return claims_.assign(**{weights: [cell(r) for _, r in other.iterrows()]})


# what each kind of verdict means for the claim, read off the verdict's first words (in order)
_FOLLOWS = {"FRAG_x100": (("supported", "at 135M too, the larger the FRAG gap, the less an attack recovers"),
                          ("reversed", "at 135M the FRAG gap ranks robustness in reverse"),
                          ("not resolved", "these checkpoints cannot tell whether the FRAG gap ranks robustness")),
            "A_f_x100": (("supported", "cos F alone ranks robustness at 135M too"),
                         ("reversed", "cos F alone ranks robustness in reverse at 135M"),
                         ("not resolved", "these checkpoints cannot tell whether cos F alone ranks robustness")),
            "l2_all": (("supported", "global L2 ranks robustness worse than FRAG, as the paper says"),
                       ("not supported", "L2 sits above FRAG, but FRAG's own ρ is not shown negative: this is not "
                                         "FRAG predicting robustness better"),
                       ("reversed", "global L2 ranks robustness better than FRAG at 135M"),
                       ("not resolved", "these checkpoints cannot tell L2 and FRAG apart"))}


def _what_follows(predictor: str, verdict: str) -> str:
    return next((text for start, text in _FOLLOWS[predictor] if verdict.startswith(start)), "")


# -- the paper's Table 1 claim: FRP keeps the least after each attack --------------------------
PAPER_TABLE1 = ("scale", "method", "attack", "es", "delta_es", "utility")
TABLE1_BASELINES = ("ga", "graddiff", "npo", "rmu", "sp")
# this repository's model labels (collect.short_label) -> the paper's Table 1 rows
TABLE1_KEYS = {"gold": "gold", "GA": "ga", "GradDiff": "graddiff", "NPO": "npo", "RMU": "rmu", "SP": "sp",
               "FRP (P 0)": "frp_p0", "FRP (P 0.15)": "frp_p0.15"}
_LABELS = {v: k for k, v in TABLE1_KEYS.items()}
_ATTACK_NAMES = {"retain": "retain", "forget": "forget", "forget_retain": "forget+retain"}


def paper_table1() -> pd.DataFrame:
    """The paper's Table 1 at Llama-3.2-1B (``data/reference/paper_table1.csv``): per method and
    attack (``none`` for the unlearned model), forget ES, ΔES and Model Utility."""
    from ..paths import DATA_DIR

    table = pd.read_csv(DATA_DIR / "reference" / "paper_table1.csv")
    if tuple(table.columns) != PAPER_TABLE1:
        raise ValueError(f"paper_table1.csv has columns {list(table.columns)}, expected {list(PAPER_TABLE1)}.")
    return table


def _lowest(values: pd.Series, frp: float) -> tuple[str, bool]:
    """``"<FRP's> vs <the lowest baseline's> (<which>)"`` and whether FRP's is lower."""
    return f"{frp:.3f} vs {values.min():.3f} ({_LABELS[values.idxmin()]})", bool(frp < values.min())


def table1_claims(table1: pd.DataFrame, target_model_utility: float, weights: str = "bf16",
                  min_utility_fraction: float = 0.5, seed_spread: float = float("nan")) -> pd.DataFrame:
    """The paper's Table 1 claim, "FRP achieves the lowest post-attack ES/ΔES", one row per attack:
    FRP (P 0) against the lowest of the baselines (GA, GradDiff, NPO, RMU, SP), forget ES after the
    attack and ΔES, in the paper at 1B and here (``table1``: :func:`frag_utils.report.tables.table1`,
    averaged over the three splits, each attack at the mean over its seeds: a few, so no
    interval). The paper's premise is that "a
    utility-collapsed model is not meaningfully robust": the verdict names FRP and the baselines it
    is compared with whose unlearned model, before any attack, has Model Utility (averaged over the
    splits) below ``min_utility_fraction`` of the target's, and FRP's low ES is not called robust
    when FRP is one of them. The verdict is read off the numbers. ``weights`` picks the precision
    of ``table1``'s rows (the paper's numbers beside them are bf16 storage at 1B either way). A
    margin between FRP and the lowest baseline smaller than ``seed_spread`` (the largest range of
    ΔES over the attack seeds of one checkpoint) is named in the verdict as not resolved: a
    conservative rule where the numbers are means over a few seeds, which move less than one seed."""
    paper = paper_table1()
    ours = table1[table1.weights.eq(weights) & table1.model.isin(list(TABLE1_KEYS))] if len(table1) else table1
    ours = ours.set_index(ours.model.map(TABLE1_KEYS)) if len(ours) else ours
    floor = min_utility_fraction * target_model_utility
    rows = []
    for attack, name in _ATTACK_NAMES.items():
        p = paper[paper.attack.eq(attack)].set_index("method")
        p_es, _ = _lowest(p.es.loc[list(TABLE1_BASELINES)], p.es["frp_p0"])
        p_delta, _ = _lowest(p.delta_es.loc[list(TABLE1_BASELINES)], p.delta_es["frp_p0"])
        cols = [f"{attack}_es", f"{attack}_delta_es", "mu_before"]
        compared = ["frp_p0", *TABLE1_BASELINES]
        known = bool(len(ours)) and set(compared) <= set(ours.index)
        known = known and bool(ours.loc[compared, cols].notna().all().all())
        row = {"claim": f"FRP (P 0) keeps the lowest forget ES and ΔES after the {name} attack", "attack": attack,
               "weights": weights,
               "paper_1B_es": p_es, "paper_1B_delta_es": p_delta}
        if known:
            base = ours.loc[list(TABLE1_BASELINES)]
            es, es_low = _lowest(base[cols[0]], ours.loc["frp_p0", cols[0]])
            delta, delta_low = _lowest(base[cols[1]], ours.loc["frp_p0", cols[1]])
            verdict = {(True, True): "holds", (True, False): "holds for ES, not for ΔES",
                       (False, True): "holds for ΔES, not for ES", (False, False): "does not hold"}[(es_low, delta_low)]
            margins = {"ES": abs(ours.loc["frp_p0", cols[0]] - base[cols[0]].min()),
                       "ΔES": abs(ours.loc["frp_p0", cols[1]] - base[cols[1]].min())}
            inside = [f"{k} by {v:.3f}" for k, v in margins.items() if v < seed_spread]
            if inside:
                verdict += (f"; the margin in {' and '.join(inside)} is inside the attack-seed spread "
                            f"({seed_spread:.3f}): not resolved")
            named = dict.fromkeys(["frp_p0", base[cols[0]].idxmin(), base[cols[1]].idxmin()])
            collapsed = [m for m in named if ours.loc[m, "mu_before"] < floor]
            if collapsed:
                verdict += (f"; Model Utility before the attack below {min_utility_fraction:g} x the target's "
                            f"({floor:.3f}): " + ", ".join(f"{_LABELS[m]} {ours.loc[m, 'mu_before']:.3f}"
                                                          for m in collapsed))
            follows = ("FRP's low forget ES comes with a collapsed model: by the paper's premise, not robustness"
                       if "frp_p0" in collapsed and (es_low or delta_low) else
                       "at 135M FRP resists this attack best, with its utility kept" if es_low and delta_low else
                       "at 135M a baseline keeps less of the forgotten knowledge by at least one of the two measures")
            mu = float(ours.loc["frp_p0", "mu_before"])
        else:
            es = delta = verdict = "not measured yet"
            mu, follows = float("nan"), ""
        rows.append({**row, "ours_es": es, "ours_delta_es": delta,
                     "frp_model_utility": mu, "verdict": verdict, "what_follows": follows})
    return pd.DataFrame(rows)


# -- the healthy frontier (issue 39): checkpoints that forget and keep their utility ------------------
UTILITY_PARTS = tuple(f"{s}/{m}" for s in ("retain_perturbed", "real_authors_perturbed", "world_facts_perturbed")
                      for m in ("probability", "rouge", "truth_ratio"))
# the part of Model Utility that one question in thirty can take to 0 at 135M (the target's own
# real-authors ROUGE is 0.12): the second healthy rule leaves it out
FRAGILE_PART = "real_authors_perturbed/rouge"
HEALTHY_RULES = {"paper": "Model Utility at least half the target's",
                 "parts": f"Model Utility without {FRAGILE_PART} at least half the target's"}
MIN_FORGETTING = 0.1  # forget ES at least this far below the target's: the checkpoint unlearned something


def utility_without(parts: dict[str, float], drop: Sequence[str] = (FRAGILE_PART,)) -> float:
    """Model Utility (the harmonic mean of :data:`UTILITY_PARTS`) recomputed without the parts
    named in ``drop``; with nothing dropped, the recorded Model Utility itself.

    Raises:
        ValueError: a part of :data:`UTILITY_PARTS` is missing from ``parts``.
    """
    from ..metrics import harmonic_mean

    missing = [k for k in UTILITY_PARTS if k not in parts]
    if missing:
        raise ValueError(f"Model Utility's parts {missing} are not in the record.")
    return harmonic_mean([parts[k] for k in UTILITY_PARTS if k not in drop])


def healthy_by_rule(df: pd.DataFrame, min_utility_fraction: float = 0.5,
                    min_forgetting: float = MIN_FORGETTING) -> pd.DataFrame:
    """``df`` (one row per checkpoint: ``es``, ``target_es``, ``model_utility``,
    ``target_model_utility``, ``utility_wo_fragile``, ``target_utility_wo_fragile``) with
    ``forgets`` (forget ES at least ``min_forgetting`` below the target's) and one boolean column
    per rule of :data:`HEALTHY_RULES`, ``healthy_<rule>``: it forgets and its utility (by that rule)
    is at least ``min_utility_fraction`` of the target's. Stated before any attack is looked at."""
    forgets = df.es <= df.target_es - min_forgetting
    return df.assign(forgets=forgets,
                     healthy_paper=forgets & (df.model_utility >= min_utility_fraction * df.target_model_utility),
                     healthy_parts=forgets & (df.utility_wo_fragile
                                              >= min_utility_fraction * df.target_utility_wo_fragile))


PRUNING = ("sp", "frp")


def frontier_subsets(df: pd.DataFrame) -> dict[str, pd.Series]:
    """Table 3's columns on the frontier: all, without FRP (the paper's two), each family, and,
    where checkpoints of several forget splits are attacked, each split alone (does a reading of
    one split hold on the other?)."""
    subsets = {"all": df.method.ne(""), "w/o FRP": df.method.ne("frp"), "pruning": df.method.isin(PRUNING),
               "dense": ~df.method.isin(PRUNING)}
    splits = list(dict.fromkeys(df.forget_split)) if "forget_split" in df else []
    return {**subsets, **({s: df.forget_split.eq(s) for s in splits} if len(splits) > 1 else {})}


def frontier_table3(df: pd.DataFrame, predictors: Sequence[str] = PAPER_TABLE3_PREDICTORS, target: str = "delta_es",
                    n_boot: int = 2000, seed: int = 0, min_checkpoints: int = 4) -> pd.DataFrame:
    """Table 3 on a set of attacked checkpoints (``target`` a list of seeds each): per subset of
    :func:`frontier_subsets` with at least ``min_checkpoints`` checkpoints, and predictor, the
    pooled ρ with its interval over methods, checkpoints and seeds and its permutation p-value
    (:func:`predictor_table`), and the within-method ρ (:func:`stratified_spearman`: within each
    method on each forget split, ``within_strata`` of them with a ρ) with its own interval and its
    p-value from reorderings within those strata."""
    rows = []
    for name, mask in frontier_subsets(df).items():
        part = df[mask]
        if len(part) < min_checkpoints:
            continue
        pooled = predictor_table(part, {name: pd.Series(True, index=part.index)}, predictors, target, n_boot, seed)
        cells = list(part[GROUP_BY] + " " + part.forget_split) if "forget_split" in part else list(part[GROUP_BY])
        for r, p in zip(pooled.to_dict("records"), predictors):
            within = stratified_spearman(part[p], part[target], list(part[GROUP_BY]), n_boot=n_boot, seed=seed,
                                         cells=cells)
            perm = permutation_spearman(part[p], part[target], seed=seed, strata=cells)
            rows.append({**r, "within_rho": within["rho"], "within_low": within["low"],
                         "within_high": within["high"], "within_p_perm": perm["p"],
                         "within_strata": sum(1 for rho, _ in within["per_group"].values() if np.isfinite(rho))})
    return pd.DataFrame(rows)


# The paper's Appendix C.5: FRAG's importance term replaced (notebook 07), what each needs, and the
# paper's ρ against ΔES on its 15 TOFU-1B checkpoints (Table importance_variants)
IMPORTANCE_REQUIRES = {"activation": "forward", "fisher": "backward", "influence": "backward", "obd": "backward",
                       "ig": "backward"}
PAPER_IMPORTANCE_RHO = {"activation": -0.92, "fisher": 0.57, "influence": 0.25, "obd": -0.79, "ig": -0.84}
# A loss barrier above this (nats of mean answer-token loss) is a bump; below it, rounding along a
# line on which the loss never rises above its chord (the paper's tab:lmc: 0.000 for 42 checkpoints)
BARRIER_BUMP = 1e-3
# The paper's tab:lmc at 1B: family -> (checkpoints, the barrier's range as printed)
PAPER_LMC = {"dense and FRP": (42, "0.000"), "SP": (4, "0.076-0.387")}


def lmc_table(df: pd.DataFrame) -> pd.DataFrame:
    """The paper's ``tab:lmc`` on a set of checkpoints (``method`` and ``barrier`` per row): per
    family (dense: GA, GradDiff, NPO, RMU; FRP; SP) the checkpoints, the barrier's least and largest
    value, and how many exceed :data:`BARRIER_BUMP`, beside the paper's 1B values (which pool dense
    and FRP)."""
    family = df.method.map(lambda m: "SP" if m == "sp" else "FRP" if m == "frp" else "dense")
    rows = []
    for name in ("dense", "FRP", "SP"):
        part = df.barrier[family.eq(name)]
        if len(part):
            paper = PAPER_LMC["SP" if name == "SP" else "dense and FRP"]
            rows.append({"family": name, "checkpoints": len(part), "barrier_min": float(part.min()),
                         "barrier_max": float(part.max()), "with_a_bump": int(part.gt(BARRIER_BUMP).sum()),
                         "paper_1B_checkpoints": paper[0], "paper_1B_barrier": paper[1]})
    return pd.DataFrame(rows)


def detectable_rho(n: int, level: float = 0.95, power: float = 0.8) -> float:
    """The smallest |ρ| that ``n`` independent checkpoints detect with ``power`` at two-sided
    ``level`` (Fisher's z with Spearman's variance 1.06 / (n − 3)). A floor: checkpoints of a few
    methods are not independent, so the design detects less."""
    if n < 4:
        return float("nan")
    z = (stats.norm.ppf(1 - (1 - level) / 2) + stats.norm.ppf(power)) * np.sqrt(1.06 / (n - 3))
    return float(np.tanh(z))


def utility_bands(df: pd.DataFrame, edges: Sequence[float] = (0.5, 0.75, 1.0, np.inf),
                  value: str = "delta_es") -> pd.DataFrame:
    """The paper's "ΔES at matched utility" (Appendix, ``ctrl_matched_utility``): checkpoints grouped
    by Model Utility as a fraction of the target's (bands between ``edges``), and per band and
    method the mean ``value`` (a list of seeds each: their mean first) over its checkpoints, with
    how many; FRP's beside each other method's in the same band is the comparison."""
    frac = df.model_utility / df.target_model_utility
    labels = [f"{lo:g}-{hi:g}" if np.isfinite(hi) else f">= {lo:g}" for lo, hi in zip(edges[:-1], edges[1:])]
    band = pd.cut(frac, list(edges), right=False, labels=labels)
    means = df[value].map(lambda v: float(np.mean(v)) if np.ndim(v) else float(v))
    out = pd.DataFrame({"band": band, "model": df.model, "value": means, "es_after": df.es_before + means})
    out = out.dropna(subset=["band"]).groupby(["band", "model"], observed=True).agg(
        checkpoints=("value", "size"), **{value: ("value", "mean")}, es_after=("es_after", "mean")).reset_index()
    return out


def headline(table3: pd.DataFrame, subset: str = "all") -> pd.DataFrame:
    """The README's one short table: per predictor of Table 3 over ``subset`` (``table3``:
    :func:`table3_beside_authors` rows of one set of checkpoints), what the paper prints at 1B (its
    FRAG column, which is cos F, in the FRAG row, as the paper names it), the authors' recomputation
    from their checkpoints at 1B, this repository's ρ with its interval, and the checkpoints and
    methods behind it. No sentence in a cell; a value the paper does not print is a dash."""
    def signed(v: float) -> str:
        return "—" if pd.isna(v) else f"{v:+.2f}"

    authors = authors_table3()
    printed = authors[authors.scale.eq("1B") & authors.source.str.startswith("paper")]
    printed = printed.assign(predictor=printed.predictor.replace({"frag_printed": "frag_gap"}))
    printed = printed.set_index(["subset", "predictor"]).rho
    if not len(table3):  # nothing attacked yet (a partial grid, the paper dry run's first collection)
        return pd.DataFrame(columns=["predictor", "paper_1B", "authors_1B", "ours", "n"])
    rows = table3[table3.subset.eq(subset)]
    return pd.DataFrame({
        "predictor": rows.predictor.map({"l2_all": "global L2", "FRAG_x100": "FRAG gap (Eq. 5)",
                                         "A_f_x100": "cos(F, ΔW²)", "A_r_x100": "cos(R, ΔW²)"}),
        "paper_1B": [signed(printed.get((subset, AUTHORS_PREDICTOR[p]), np.nan)) for p in rows.predictor],
        "authors_1B": [signed(v) for v in rows.authors_1B],
        "ours": [f"{r:+.2f} [{lo:+.2f}, {hi:+.2f}]" for r, lo, hi in zip(rows.rho, rows.low, rows.high)],
        "n": [f"{int(n)} ({int(m)} methods)" for n, m in zip(rows.n, rows.methods)]}).reset_index(drop=True)
