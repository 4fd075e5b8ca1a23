"""Spearman's ρ with a nested bootstrap interval (methods, then checkpoints, then attack seeds), permutation
p-values and the within-stratum ρ; nothing here knows the paper (:mod:`.analysis` applies them)."""
from __future__ import annotations

import functools
import itertools
import math
from typing import Sequence

import numpy as np
from scipy import stats

LEVEL = 0.95  # every interval's (a verdict says "with 95 % confidence")


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho (average ranks for ties); NaN when either side is constant or n < 3."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    return float(stats.spearmanr(x, y).statistic)


def _clean(xs: Sequence[Sequence[float]], y: Sequence[float | Sequence[float]],
           groups: Sequence | None = None) -> tuple[list, list, int, list | None]:
    """The checkpoints every ``x`` of ``xs`` and at least one seed of ``y`` are finite on: the x
    arrays, the finite seeds of each, how many checkpoints were dropped, and their groups."""
    xs = [np.asarray(x, float) for x in xs]
    runs = [np.atleast_1d(np.asarray(v, float)) for v in y]
    runs = [v[np.isfinite(v)] for v in runs]
    keep = [i for i in range(len(y)) if all(np.isfinite(x[i]) for x in xs) and len(runs[i])]
    kept_groups = None if groups is None else [list(groups)[i] for i in keep]
    return [x[keep] for x in xs], [runs[i] for i in keep], len(y) - len(keep), kept_groups


@functools.lru_cache(maxsize=32)
def _draws(counts: tuple[int, ...], n_boot: int, seed: int, groups: tuple | None) -> tuple:
    """The bootstrap's resamples of checkpoints with ``counts`` seeds each, drawn with replacement at each level
    that varies: methods (``groups``), the checkpoints of each drawn method, the seeds of each drawn checkpoint;
    drawn once, so every predictor scored on the same checkpoints sees the same resamples (paired).

    Each level of a resample is one call of the generator with an array of bounds (``integers(0, highs)``),
    which draws the stream that one call per method or checkpoint draws; a checkpoint of one seed draws nothing.

    Returns:
        ``(sizes, idx, seeds, lengths)``, read-only: the checkpoints each resample drew (``sizes[b]``, all in
        ``idx``); each drawn checkpoint's drawn seeds as ascending positions in all seeds' values (the same
        seeds in another order are the same mean), padded with one past the end; how many checkpoints each
        drawn method brought, in drawing order over all resamples (one ``n`` per resample without ``groups``).
    """
    rng = np.random.default_rng(seed)
    n, counts_ = len(counts), np.asarray(counts, int)
    offsets = np.concatenate([[0], np.cumsum(counts_)]).astype(int)
    width = max(counts, default=1)
    if groups is not None:
        members = [np.flatnonzero(np.asarray(groups) == g) for g in dict.fromkeys(groups)]
        flat, sizes_m = np.concatenate(members), np.array([len(m) for m in members])
        starts_m = np.cumsum(sizes_m) - sizes_m
    idxs, rows, lengths = [], [], []
    for _ in range(n_boot):
        if groups is None:
            idx, lens = rng.integers(0, n, n), [n]
        else:
            drawn = rng.integers(0, len(members), len(members))
            lens = sizes_m[drawn]
            idx = flat[np.repeat(starts_m[drawn], lens) + rng.integers(0, np.repeat(lens, lens))]
        k = counts_[idx]
        drew = rng.integers(0, np.repeat(k, k))  # each checkpoint's seeds, checkpoint after checkpoint
        row = np.full((len(idx), width), width)  # after any seed's position, so a sort leaves it last
        row[np.repeat(np.arange(len(idx)), k), np.arange(len(drew)) - np.repeat(np.cumsum(k) - k, k)] = drew
        row.sort(axis=1)
        rows.append(np.where(row < width, offsets[idx][:, None] + row, offsets[-1]))
        idxs.append(idx), lengths.extend(lens)
    out = (np.array([len(i) for i in idxs], int), np.concatenate(idxs) if idxs else np.zeros(0, int),
           np.concatenate(rows) if rows else np.zeros((0, width), int), np.asarray(lengths, int))
    for a in out:
        a.setflags(write=False)
    return out


def _ranks(a: np.ndarray) -> np.ndarray:
    """Each row's ranks, ties given their average rank (scipy's ``rankdata(a, axis=1)``, the same floats)."""
    order = np.argsort(a, axis=1, kind="stable")
    s = np.take_along_axis(a, order, axis=1)
    n = a.shape[1]
    pos = np.broadcast_to(np.arange(n), a.shape)
    new = np.ones(a.shape, bool)
    new[:, 1:] = s[:, 1:] != s[:, :-1]
    first = np.maximum.accumulate(np.where(new, pos, 0), axis=1)  # each tie block's first position ...
    last = np.ones(a.shape, bool)
    last[:, :-1] = new[:, 1:]
    end = np.minimum.accumulate(np.where(last, pos, n - 1)[:, ::-1], axis=1)[:, ::-1]  # ... and its last
    out = np.empty(a.shape)
    np.put_along_axis(out, order, (first + end) / 2 + 1, axis=1)
    return out


def _rows_spearman(x: np.ndarray, y: np.ndarray, y_ranked: bool = False) -> np.ndarray:
    """Spearman's ρ of each row of ``x`` (or a 1-D ``x``, ranked once) with that row of ``y`` (``[rows, n]``;
    ``y_ranked``: its rows are ranks already, as a reordering of ranked values is)."""
    if y.shape[1] < 3:
        return np.full(len(y), np.nan)
    rx = np.broadcast_to(_ranks(x[None]), y.shape) if x.ndim == 1 else _ranks(x)
    ry = y if y_ranked else _ranks(y)
    rx, ry = rx - rx.mean(axis=1, keepdims=True), ry - ry.mean(axis=1, keepdims=True)
    norm = np.sqrt((rx ** 2).sum(axis=1) * (ry ** 2).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(norm > 0, (rx * ry).sum(axis=1) / norm, np.nan)


def _resampled(runs: list, n_boot: int, seed: int, groups: Sequence | None) -> tuple:
    """The resamples of :func:`_draws` for these checkpoints: the drawn checkpoints, their seed means (a sum
    in ascending order, so that equal seeds are an equal mean) and the strata."""
    if n_boot < 1 or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"n_boot must be >= 1 and seed an integer (the resamples are drawn once per seed); "
                         f"got {n_boot}, {seed!r}.")
    sizes, idx, seeds, lengths = _draws(tuple(len(v) for v in runs), n_boot, int(seed),
                                      None if groups is None else tuple(groups))
    flat = np.concatenate([*runs, [0.0]])  # the padding position reads the 0 at the end
    values = flat[seeds]
    ys = values[:, 0].copy()
    for j in range(1, values.shape[1]):
        ys += values[:, j]
    return sizes, idx, ys / np.maximum((seeds < len(flat) - 1).sum(axis=1), 1), lengths


def _boot_rhos(xs: list[np.ndarray], runs: list, n_boot: int, seed: int, groups: Sequence | None) -> np.ndarray:
    """ρ of each of ``xs`` with ΔES in every resample (``[len(xs), n_boot]``), resamples of one length together."""
    sizes, idx, ys, _ = _resampled(runs, n_boot, seed, groups)
    starts = np.cumsum(sizes) - sizes
    out = np.full((len(xs), n_boot), np.nan)
    for m in np.unique(sizes):
        which = np.flatnonzero(sizes == m)
        pos = starts[which][:, None] + np.arange(m)
        for k, x in enumerate(xs):
            out[k, which] = _rows_spearman(x[idx[pos]], ys[pos])
    return out


def _interval(draws: list) -> tuple[float, float, int]:
    draws = np.asarray(draws, float)
    ok = draws[~np.isnan(draws)]
    tail = (1 - LEVEL) / 2
    low, high = (np.quantile(ok, [tail, 1 - tail]) if len(ok) else (np.nan, np.nan))
    return float(low), float(high), int(len(draws) - len(ok))


def bootstrap_spearman(x: Sequence[float], y: Sequence[float | Sequence[float]], n_boot: int = 2000,
                       seed: int = 0, groups: Sequence | None = None) -> dict:
    """Spearman's rho with a percentile bootstrap interval over resampled checkpoints.

    ``y[i]`` is one number, or checkpoint ``i``'s numbers under several attack seeds: ρ is against their mean,
    and the resamples (:func:`_draws`: methods first with ``groups``, as checkpoints of one method are not
    independent) carry the seed noise too. Checkpoints with a non-finite ``x`` or no finite seed are dropped
    (``n_dropped``), as are non-finite seeds; resamples with a constant side have no ρ (``n_degenerate``).

    Returns:
        ``{"rho", "low", "high", "n", "n_groups", "n_seeds", "n_boot", "n_degenerate", "n_dropped"}``
        (``n_seeds``: the seeds per checkpoint; ``n_groups``: methods, or ``n``).
    """
    (x,), runs, n_dropped, groups = _clean([x], y, groups)  # rho and its interval describe the same checkpoints
    rho = spearman(x, [v.mean() for v in runs])
    low, high, degenerate = _interval(_boot_rhos([x], runs, n_boot, seed, groups)[0])
    return {"rho": rho, "low": low, "high": high, "n": len(x),
            "n_groups": len(x) if groups is None else len(set(groups)), "n_seeds": [len(v) for v in runs],
            "n_boot": n_boot, "n_degenerate": degenerate, "n_dropped": n_dropped}


def bootstrap_spearman_gap(x_a: Sequence[float], x_b: Sequence[float], y: Sequence[float | Sequence[float]],
                           n_boot: int = 2000, seed: int = 0, groups: Sequence | None = None,
                           absolute: bool = False) -> dict:
    """ρ(x_b, ΔES) − ρ(x_a, ΔES), ``{"gap", "low", "high", "n", "n_degenerate", "n_dropped"}``, over the
    paired resamples of :func:`bootstrap_spearman`: whether one predictor ranks better, as two intervals cannot say.
    ``absolute``: |ρ(x_b)| − |ρ(x_a)|, for two predictors whose signs need not agree (above 0: x_b ranks better)."""
    (a, b), runs, n_dropped, groups = _clean([x_a, x_b], y, groups)
    means = [v.mean() for v in runs]
    size = np.abs if absolute else (lambda v: v)
    gap = size(spearman(b, means)) - size(spearman(a, means))
    rho_a, rho_b = _boot_rhos([a, b], runs, n_boot, seed, groups)
    low, high, degenerate = _interval(size(rho_b) - size(rho_a))
    return {"gap": gap, "low": low, "high": high, "n": len(runs), "n_degenerate": degenerate, "n_dropped": n_dropped}


def _partial(r_xy: np.ndarray, r_xz: np.ndarray, r_yz: np.ndarray) -> np.ndarray:
    """The partial correlation of x and y given z from the three pairwise ones; NaN where z explains x or y wholly."""
    with np.errstate(invalid="ignore", divide="ignore"):
        den = np.sqrt((1 - r_xz ** 2) * (1 - r_yz ** 2))
        return np.where(den > 0, (r_xy - r_xz * r_yz) / den, np.nan)


def partial_spearman(x: Sequence[float], z: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's partial ρ of ``x`` and ``y`` given ``z``: what ``x`` ranks of ``y`` that ``z`` does not,
    (r_xy − r_xz r_yz) / √((1 − r_xz²)(1 − r_yz²)) with each r Spearman's."""
    return float(_partial(*(np.asarray(spearman(a, b)) for a, b in ((x, y), (x, z), (y, z)))))


def bootstrap_partial_spearman(x: Sequence[float], z: Sequence[float], y: Sequence[float | Sequence[float]],
                               n_boot: int = 2000, seed: int = 0, groups: Sequence | None = None) -> dict:
    """:func:`partial_spearman` of ``x`` and ``y`` (seeds averaged) given ``z``, with its interval over the resamples
    of :func:`bootstrap_spearman` (the same draws as every ρ of these checkpoints): whether ``x`` adds rank
    information beyond ``z``. Returns ``{"rho", "low", "high", "n", "n_degenerate", "n_dropped"}``."""
    (xa, za), runs, n_dropped, groups = _clean([x, z], y, groups)
    rho = partial_spearman(xa, za, [v.mean() for v in runs])
    sizes, idx, ys, _ = _resampled(runs, n_boot, seed, groups)
    starts, draws = np.cumsum(sizes) - sizes, np.full(n_boot, np.nan)
    for m in np.unique(sizes):
        which = np.flatnonzero(sizes == m)
        pos = starts[which][:, None] + np.arange(m)
        xs, zs = xa[idx[pos]], za[idx[pos]]
        draws[which] = _partial(_rows_spearman(xs, ys[pos]), _rows_spearman(xs, zs), _rows_spearman(ys[pos], zs))
    low, high, degenerate = _interval(draws)
    return {"rho": rho, "low": low, "high": high, "n": len(runs), "n_degenerate": degenerate, "n_dropped": n_dropped}


@functools.lru_cache(maxsize=32)
def _permutations(n: int, n_perm: int, seed: int, strata: tuple[tuple[int, ...], ...] | None = None):
    """``(orders, exact)``: every reordering of ``n`` items (within each stratum) where there are at most
    ``n_perm``, else ``n_perm`` random ones, as ``[orders, n]``; drawn once for every predictor."""
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


def _stratified(x: np.ndarray, ys: np.ndarray, groups: list[np.ndarray], ranked: bool = False) -> np.ndarray:
    """The within-group ρ of ``x`` with each row of ``ys`` (``[rows, n]``; ``ranked``: each group's ranks
    already), averaged over the groups weighted by their sizes; a group of fewer than 3 or constant on a side
    has no ρ and is left out."""
    ys = np.atleast_2d(ys)
    total, weight = np.zeros(len(ys)), np.zeros(len(ys))
    for g in groups:
        if len(g) < 3:
            continue
        r = _rows_spearman(x[g], ys[:, g], ranked)
        ok = np.isfinite(r)
        total[ok] += len(g) * r[ok]
        weight[ok] += len(g)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(weight > 0, total / weight, np.nan)


def _p_value(observed: float, null: Sequence[float], exact: bool) -> float:
    """Two-sided: the share of the null at least as far from 0 as ``observed`` ((k + 1) / (N + 1) for random
    reorderings); a tiny tolerance keeps ties of floating-point rank sums."""
    null = np.abs(np.asarray(null, float)[~np.isnan(null)])
    k = int((null >= abs(observed) - 1e-12).sum())
    return k / len(null) if exact else (k + 1) / (len(null) + 1)


def permutation_spearman(x: Sequence[float], y: Sequence[float | Sequence[float]], n_perm: int = 20000,
                         seed: int = 0, strata: Sequence | None = None) -> dict:
    """Two-sided permutation p-value of Spearman's ρ(x, y) (``y``: seeds averaged), ``{"rho", "p", "n", "n_perm",
    "exact"}``; with ``strata`` (each checkpoint's method) reordered only within a method, the null of
    :func:`stratified_spearman`. Across every checkpoint it takes them as exchangeable, which checkpoints of one
    method are not: read a pooled p-value beside the interval that resamples methods, not in its place."""
    (x,), runs, _, strata = _clean([x], y, strata)
    ys = np.array([v.mean() for v in runs])
    groups = None if strata is None else [np.flatnonzero(np.asarray(strata) == g) for g in dict.fromkeys(strata)]
    rho = spearman(x, ys) if groups is None else float(_stratified(x, ys, groups)[0])
    orders, exact = _permutations(len(x), n_perm, seed, None if groups is None else tuple(map(tuple, groups)))
    if not np.isfinite(rho):
        return {"rho": rho, "p": np.nan, "n": len(x), "n_perm": len(orders), "exact": exact}
    # a reordering of ranks is the ranks of the reordered values: rank once (within each stratum), then reorder
    ranks = np.empty(len(ys))
    for g in groups or [np.arange(len(ys))]:
        ranks[g] = _ranks(ys[g][None])[0]
    permuted = ranks[orders]
    null = _rows_spearman(x, permuted, True) if groups is None else _stratified(x, permuted, groups, True)
    return {"rho": rho, "p": _p_value(rho, null, exact), "n": len(x), "n_perm": len(orders), "exact": exact}


def _within_draws(x: np.ndarray, yb: np.ndarray, sizes: np.ndarray, idx: np.ndarray, lengths: np.ndarray,
                  cell: np.ndarray) -> np.ndarray:
    """:func:`_stratified` of every resample at once (strata: each drawn method's checkpoints of one cell), bit for
    bit as the loop over resamples: the strata's ρ scored together by size, then summed per resample in order."""
    n_boot = len(sizes)
    draw = np.repeat(np.arange(n_boot), sizes)
    # each drawn method is a run of consecutive positions: number them over all resamples
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
                        n_boot: int = 2000, seed: int = 0, cells: Sequence | None = None) -> dict:
    """The within-method rank correlation: Spearman's ρ of ``x`` with ``y`` among the checkpoints of
    each method (its strengths), averaged over methods weighted by their checkpoints. Differences
    between methods do not enter it, so it is where more checkpoints per method buy power (the pooled
    ρ's interval stays wide with few methods however many checkpoints each has). With ``cells`` (the
    method on one forget split, as ΔES on two forget sets are not one scale) the ρ is taken within
    each cell, while the interval (:func:`_draws`) still draws methods whole.

    Returns:
        ``{"rho", "low", "high", "n", "n_groups", "per_group": {cell: (rho, n)}, "n_degenerate"}`` (a cell
        of fewer than 3 checkpoints has no ρ: it counts in ``n``, not in ``rho``).
    """
    cells = list(groups) if cells is None else list(cells)
    codes = {c: k for k, c in enumerate(dict.fromkeys(cells))}
    (x,), runs, _, keyed = _clean([x], y, [(g, codes[c]) for g, c in zip(groups, cells)])
    groups, cell = [g for g, _ in keyed], np.array([c for _, c in keyed], int)
    labels = [c for c in codes if codes[c] in set(cell)]
    members = [np.flatnonzero(cell == codes[c]) for c in labels]
    ys = np.array([v.mean() for v in runs])
    rho = float(_stratified(x, ys, members)[0])
    sizes, idx, yb, lengths = _resampled(runs, n_boot, seed, groups)
    low, high, degenerate = _interval(_within_draws(x, yb, sizes, idx, lengths, cell))
    return {"rho": rho, "low": low, "high": high, "n": len(x), "n_groups": len(set(groups)),
            "per_group": {c: (spearman(x[m], ys[m]), len(m)) for c, m in zip(labels, members)},
            "n_degenerate": degenerate}
