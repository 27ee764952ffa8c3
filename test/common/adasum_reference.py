"""Adasum in NumPy float64: the reference that kolo's Adasum (ops/adasum.h) is checked
against in every binding's tests. It runs the algorithm itself, over simulated ranks:
recursive vector halving, distance doubling over a fused buffer (tensor by tensor), the dot
products and squared norms of each tensor summed over the ranks that took part so far,
Horovod's coefficients, and the reverse allgather. :func:`pairwise_tree` is the same
combination written as a tree over ranks, which the recursion must equal (checked in
:func:`self_check`).

Nothing here imports a framework or kolo.
"""
import numpy as np

SMALLEST = np.sqrt(np.finfo(np.float64).tiny)  # sqrt(DBL_MIN): Horovod's cut-off


def combine(a, b):
    """The pair's Adasum, Horovod's formula: a' = (1 - a.b/(2|a|^2)) a + (1 - a.b/(2|b|^2)) b,
    a vector whose squared norm is below sqrt(DBL_MIN) keeping the coefficient 1."""
    dot, aa, bb = float(a @ b), float(a @ a), float(b @ b)
    ca = 1.0 - dot / aa * 0.5 if aa >= SMALLEST else 1.0
    cb = 1.0 - dot / bb * 0.5 if bb >= SMALLEST else 1.0
    return ca * a + cb * b


def _halve(counts, left):
    """(kept, given) per tensor: the left rank keeps the first sum(counts)//2 elements."""
    first, before, kept, given = sum(counts) // 2, 0, [], []
    for c in counts:
        in_first = min(max(first - before, 0), c)
        kept.append(in_first if left else c - in_first)
        given.append(c - in_first if left else in_first)
        before += c
    return kept, given


def adasum(inputs):
    """``inputs[r]``: rank r's list of tensors (1-D float arrays, the same sizes on every
    rank). Returns the list of result tensors (float64) every rank ends with."""
    n = len(inputs)
    assert n & (n - 1) == 0, "Adasum runs on a power of two ranks"
    counts = [len(t) for t in inputs[0]]
    bounds = np.cumsum([0] + counts)
    data = [np.concatenate([np.asarray(t, np.float64) for t in ranks] or [np.zeros(0)])
            for ranks in inputs]
    # Each rank's part of the buffer: its first element and per-tensor counts.
    start = [0] * n
    part = [list(counts) for _ in range(n)]
    d = 1
    while d < n:
        before = [x.copy() for x in data]
        halves = [_halve(part[r], (r & d) == 0) for r in range(n)]
        new_start = [start[r] + (0 if (r & d) == 0 else sum(halves[r][1])) for r in range(n)]
        # Per rank and tensor: the dot product and the left and right squared norms of its
        # kept slice, summed over the 2d ranks of its group.
        partial = np.zeros((n, len(counts), 3))
        for r in range(n):
            off = new_start[r]
            for t, k in enumerate(halves[r][0]):
                a, b = before[r][off:off + k], before[r ^ d][off:off + k]
                left = (r & d) == 0
                partial[r, t] = [a @ b, a @ a if left else b @ b, b @ b if left else a @ a]
                off += k
        for r in range(n):
            group = [q for q in range(n) if q // (2 * d) == r // (2 * d)]
            sums = partial[group].sum(axis=0)
            off, left = new_start[r], (r & d) == 0
            for t, k in enumerate(halves[r][0]):
                dot, lsq, rsq = sums[t]
                own, other = (lsq, rsq) if left else (rsq, lsq)
                ca = 1.0 - dot / own * 0.5 if own >= SMALLEST else 1.0
                cb = 1.0 - dot / other * 0.5 if other >= SMALLEST else 1.0
                data[r][off:off + k] = ca * before[r][off:off + k] + cb * before[r ^ d][off:off + k]
                off += k
        start, part = new_start, [halves[r][0] for r in range(n)]
        d *= 2
    # The allgather: each rank's final slice, put together.
    out = np.zeros(int(bounds[-1]))
    for r in range(n):
        k = sum(part[r])
        out[start[r]:start[r] + k] = data[r][start[r]:start[r] + k]
    return [out[bounds[t]:bounds[t + 1]] for t in range(len(counts))]


def pairwise_tree(inputs):
    """The same result written as a tree: ranks [0, n/2) and [n/2, n) combined, tensor by
    tensor, recursively."""
    if len(inputs) == 1:
        return [np.asarray(t, np.float64) for t in inputs[0]]
    half = len(inputs) // 2
    a, b = pairwise_tree(inputs[:half]), pairwise_tree(inputs[half:])
    return [combine(x, y) for x, y in zip(a, b)]


def inputs(seed, sizes, dtype, n):
    """Every one of ``n`` ranks' tensors of ``sizes`` elements (NumPy arrays of ``dtype``,
    normally distributed), the same on every rank for one ``seed``."""
    rng = np.random.default_rng(seed)
    return [[rng.normal(size=k).astype(dtype) for k in sizes] for _ in range(n)]


def check(every, outputs, dtype, factor=1.0, rank=None):
    """Asserts that ``outputs`` (one rank's results, in the order of the tensors) are the
    reference's for ``every`` rank's inputs, times ``factor``, within close()."""
    want = adasum([[np.asarray(a, np.float64) for a in ranks] for ranks in every])
    for t, (w, o) in enumerate(zip(want, outputs)):
        got = np.asarray(o, np.float64)
        assert close(dtype, w * factor, got), (rank, t, np.abs(w * factor - got).max())


def close(dtype, want, got):
    """kolo's result ``got`` (any float dtype) against the float64 reference ``want``:
    within a few rounding steps of ``dtype`` relative to the tensor's size."""
    want, got = np.asarray(want, np.float64), np.asarray(got, np.float64)
    eps = float(np.finfo(dtype).eps)
    scale = max(float(np.abs(want).max(initial=0.0)), float(np.finfo(dtype).tiny))
    return bool(np.all(np.abs(want - got) <= 8 * eps * scale))


def self_check():
    """The recursion equals the tree (raises AssertionError otherwise)."""
    rng = np.random.default_rng(7)
    for n in (1, 2, 4, 8):
        for counts in ([5], [3, 0, 7, 1], [1], [2, 9]):
            inputs = [[rng.normal(size=c) for c in counts] for _ in range(n)]
            for x, y in zip(adasum(inputs), pairwise_tree(inputs)):
                assert np.allclose(x, y, rtol=1e-12, atol=1e-12), (n, counts)


if __name__ == "__main__":
    self_check()
    print("adasum reference: OK")
