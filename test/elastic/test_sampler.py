"""ElasticSampler's arithmetic, in one process: ranks are simulated by one sampler per
rank (size() and rank() patched). Against Horovod's sampler (its algorithm restated in
``HorovodSampler``): the same indices per rank in the same order, the same state after
record_batch; across a change of size (4 -> 2, 2 -> 4) after a commit, the epoch goes on
without repeating or skipping a sample."""
import math
import random

import numpy as np
import pytest

import kolo.torch.elastic.sampler as sampler_module
from kolo.torch.elastic import ElasticSampler


class HorovodSampler:
    """Horovod 0.28's ElasticSampler arithmetic (horovod/torch/elastic/sampler.py): the
    epoch's order is random.Random(seed + epoch).shuffle of range(n); processed_num
    counts record_batch(batch_size) * num_replicas; the rest of the order, padded with
    its first samples, is dealt to the ranks round-robin."""

    def __init__(self, n, num_replicas, rank, seed=0, epoch=0, processed_num=0):
        order = list(range(n))
        random.Random(seed + epoch).shuffle(order)
        remaining = order[processed_num:]
        self.num_replicas, self.processed_num = num_replicas, processed_num
        self.num_samples = int(math.ceil(len(remaining) / num_replicas))
        total = self.num_samples * num_replicas
        padded = remaining + remaining[:total - len(remaining)]
        self.indices = padded[rank:total:num_replicas]

    def record_batch(self, batch_idx, batch_size):
        self.processed_num += batch_size * self.num_replicas


@pytest.fixture
def world(monkeypatch):
    """world(size) -> one sampler per simulated rank (made by ``make(rank)``)."""
    current = {"size": 1, "rank": 0}
    monkeypatch.setattr(sampler_module, "size", lambda: current["size"])
    monkeypatch.setattr(sampler_module, "rank", lambda: current["rank"])

    def ranks(size, make):
        """``make(rank)`` as each rank; methods that partition (set_epoch, load_state_dict)
        see the rank of their sampler (the patched functions are asked in reset())."""
        out = []
        for r in range(size):
            current.update(size=size, rank=r)
            out.append(_AsRank(make(r), current, size, r))
        return out
    return ranks


class _AsRank:
    """A sampler whose calls run with size() and rank() of its simulated rank."""

    def __init__(self, sampler, current, size, rank):
        self.__dict__.update(_s=sampler, _current=current, _size=size, _rank=rank)

    def __getattr__(self, name):
        value = getattr(self._s, name)
        if not callable(value):
            return value

        def call(*args, **kwargs):
            self._current.update(size=self._size, rank=self._rank)
            return value(*args, **kwargs)
        return call

    def __iter__(self):
        return iter(self._s)

    def __len__(self):
        return len(self._s)


DATASET = list(range(48))


@pytest.mark.parametrize("size,batch", [(1, 4), (2, 3), (4, 2), (3, 5)])
def test_same_indices_and_progress_as_horovods_sampler(world, size, batch):
    ours = world(size, lambda r: ElasticSampler(DATASET, seed=7))
    for s in ours:
        s.set_epoch(2)
    theirs = [HorovodSampler(len(DATASET), size, r, seed=7, epoch=2) for r in range(size)]
    for o, t in zip(ours, theirs):
        assert list(o) == t.indices and len(o) == t.num_samples
    for b in range(2):
        for o, t in zip(ours, theirs):
            o.record_batch(b, batch)
            t.record_batch(b, batch)
            assert o.processed_num == t.processed_num
    # Resumed from a commit: Horovod's state dict (processed_num) and ours agree.
    state = ours[0].state_dict()
    resumed = world(size, lambda r: ElasticSampler(DATASET, seed=7))
    for r, s in enumerate(resumed):
        s.load_state_dict(state)
        want = HorovodSampler(len(DATASET), size, r, seed=7, epoch=2,
                              processed_num=theirs[0].processed_num)
        assert list(s) == want.indices
    horovod_state = {"epoch": 2, "processed_num": theirs[0].processed_num}
    for s in world(size, lambda r: ElasticSampler(DATASET, seed=7)):
        s.load_state_dict(horovod_state)
        assert s.remaining_indices == resumed[0].remaining_indices


def run_batches(samplers, batch, count):
    """``count`` batches on every rank in lockstep: the samples each processed."""
    seen = []
    iters = [iter(s) for s in samplers]
    for b in range(count):
        for s, it in zip(samplers, iters):
            for _ in range(batch):
                seen.append(next(it))
            s.record_batch(b, batch)
    return seen


@pytest.mark.parametrize("before,after,batch,done", [(4, 2, 2, 2), (2, 4, 3, 3),
                                                     (4, 3, 2, 1), (3, 4, 4, 2)])
def test_a_size_change_after_a_commit_neither_repeats_nor_skips(world, before, after, batch,
                                                                done):
    old = world(before, lambda r: ElasticSampler(DATASET, seed=1))
    seen = run_batches(old, batch, done)
    # The ranks die after the commit; the new incarnation loads one rank's commit (any
    # rank's: they are the same) and partitions the rest among its ranks.
    commits = [s.state_dict() for s in old]
    for c in commits[1:]:
        assert np.array_equal(c["processed_mask"], commits[0]["processed_mask"])
    new = world(after, lambda r: ElasticSampler(DATASET, seed=1))
    for s in new:
        s.load_state_dict(commits[-1])
    rest = len(new[0])
    seen += run_batches(new, 1, rest)
    counts = np.bincount(seen, minlength=len(DATASET))
    assert counts.min() == 1, "skipped: %s" % np.flatnonzero(counts == 0).tolist()
    padding = rest * after - len(new[0].remaining_indices)  # Horovod's padding at the end
    assert counts.sum() - len(DATASET) == padding, "repeated: %s" % np.flatnonzero(
        counts > 1).tolist()
    assert new[0].processed_num == len(DATASET)
    for s in new:
        s.set_epoch(1)
        assert s.processed_num == 0 and len(s) == math.ceil(len(DATASET) / after)


def test_record_indices_and_horovods_older_state_dict(world):
    (s,) = world(1, lambda r: ElasticSampler(DATASET, shuffle=False))
    s.record_indices([0, 5, 7])
    assert s.processed_indices == {0, 5, 7} and s.processed_num == 3
    assert len(s) == len(DATASET)  # this pass goes on; a reset partitions what is left
    s.reset()
    assert 5 not in s.remaining_indices and len(s) == len(DATASET) - 3
    s._share_recorded()  # one rank: nothing to share, the record stays
    assert s.processed_indices == {0, 5, 7} and s._recorded == []
    (t,) = world(1, lambda r: ElasticSampler(DATASET, shuffle=False))
    t.load_state_dict({"epoch": 0, "processed_indices": {1, 2}})  # Horovod 0.20-0.22's
    assert t.processed_indices == {1, 2} and list(t)[:2] == [0, 3]
    assert t.get_indices(1, 2) == [4, 5]


def test_a_tiny_remainder_is_padded_cyclically(world):
    ranks = world(4, lambda r: ElasticSampler(list(range(5)), shuffle=False))
    for s in ranks:
        s.load_state_dict({"epoch": 0, "processed_num": 4})
    assert [list(s) for s in ranks] == [[4], [4], [4], [4]]
