"""``ElasticSampler``: partitions a dataset across ranks and, after a reset, partitions
what is left of the epoch across the new ranks (Horovod's
``horovod.torch.elastic.sampler``), without repeating or skipping a sample also when
ranks died: the processed samples of every rank are in every rank's commit.

The processed samples of the epoch are a mask over the dataset, the same on every rank:
``record_batch`` (every rank records the same batches, in the lockstep of data-parallel
training) marks the batch of every rank, computed locally, without communication;
``record_indices`` marks this rank's own indices, which the next commit shares with the
other ranks (one small allreduce per commit, and an allgather when a rank recorded any).
"""
import math
import random

import numpy as np
import torch
import torch.utils.data

from kolo.torch import mpi_ops as _ops
from kolo.torch.basics import rank, size


class ElasticSampler(torch.utils.data.Sampler):
    """Sampler that partitions the dataset across ranks and repartitions the rest of the
    epoch after reset events.

    Use it as Horovod's: (1) put it in the ``TorchState``; (2) call ``record_batch``
    (or ``record_indices``) after processing samples; (3) call ``set_epoch`` at the end
    of each epoch, which clears the processed samples.

    Args:
        dataset: the dataset (of constant size).
        shuffle: shuffle the indices (default True), by ``seed + epoch`` as Horovod does
            (the same order as Horovod's sampler).
        seed: the random seed; the same on every rank (default 0).
    """

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self._processed = np.zeros(len(dataset), dtype=bool)  # this epoch, every rank's
        self._recorded = []  # record_indices() of this rank not yet shared
        self._order_key, self._order_cache = None, None
        self._padded = np.zeros(0, dtype=np.int64)
        self.num_replicas = 0
        self.rank = 0
        self.remaining_indices = []
        self.num_samples = 0
        self.total_size = 0
        self.indices = []
        self.reset()

    def set_epoch(self, epoch):
        """Sets the epoch (the shuffle's seed) and clears the processed samples: call it
        at the end of an epoch, so that a partial epoch is not processed again."""
        self.epoch = epoch
        self._processed[:] = False
        self._recorded = []
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Records batch ``batch_idx`` (``batch_size`` samples per rank, counted from the
        start of this pass over the sampler) as processed on every rank. Every rank
        records the same batches, so each computes their union itself."""
        start = batch_idx * batch_size * self.num_replicas
        stop = min(start + batch_size * self.num_replicas, self.total_size)
        if start < stop:
            self._processed[self._padded[start:stop]] = True

    def record_indices(self, indices):
        """Records dataset ``indices`` that this rank processed; the next commit shares
        them with the other ranks (collective: every rank commits)."""
        indices = np.fromiter((int(i) for i in indices), dtype=np.int64)
        self._processed[indices] = True
        self._recorded.append(indices)

    def get_indices(self, batch_idx, batch_size):
        """This rank's indices of batch ``batch_idx`` of the current pass."""
        start = batch_idx * batch_size
        return self.indices[start:min(start + batch_size, len(self.indices))]

    @property
    def processed_num(self):
        """How many samples of the epoch are processed (by every rank together)."""
        return int(np.count_nonzero(self._processed))

    @property
    def processed_indices(self):
        return set(np.flatnonzero(self._processed).tolist())

    def state_dict(self):
        return dict(epoch=self.epoch, processed_num=self.processed_num,
                    processed_mask=self._processed.copy())

    def load_state_dict(self, state_dict):
        """Loads kolo's state dict, or Horovod's: ``processed_num`` (the first samples of
        the epoch's order) or ``processed_indices`` (a set)."""
        self.epoch = state_dict["epoch"]
        mask = np.zeros(len(self.dataset), dtype=bool)
        if "processed_mask" in state_dict:
            mask[:] = np.asarray(state_dict["processed_mask"], dtype=bool)
        elif "processed_indices" in state_dict:
            mask[np.fromiter(state_dict["processed_indices"], dtype=np.int64)] = True
        else:
            mask[self._order()[:state_dict["processed_num"]]] = True
        self._processed = mask
        self._recorded = []
        self.reset()

    def reset(self):
        """Partitions the samples not yet processed this epoch across the current
        ranks."""
        self.num_replicas = size()
        self.rank = rank()
        order = self._order()
        remaining = order[~self._processed[order]]
        self.remaining_indices = remaining.tolist()
        self.num_samples = int(math.ceil(len(remaining) / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas
        # Padded to a multiple of the ranks by repeating the first samples (Horovod's).
        self._padded = np.resize(remaining, self.total_size) if len(remaining) else remaining

    def __iter__(self):
        self.indices = self._padded[self.rank:self.total_size:self.num_replicas].tolist()
        return iter(self.indices)

    def __len__(self):
        return self.num_samples

    def _order(self):
        """The epoch's order of the dataset: Horovod's (Python's random.Random(seed +
        epoch).shuffle), computed once per epoch."""
        key = (self.shuffle, self.seed, self.epoch, len(self.dataset))
        if key != self._order_key:
            order = list(range(len(self.dataset)))
            if self.shuffle:
                random.Random(self.seed + self.epoch).shuffle(order)
            self._order_key, self._order_cache = key, np.array(order, dtype=np.int64)
        return self._order_cache

    def _share_recorded(self):
        """Collective (every rank, at a save): marks every rank's ``record_indices``
        since the last save on every rank."""
        mine = np.concatenate(self._recorded) if self._recorded else np.zeros(0, np.int64)
        self._recorded = []
        if size() == 1:
            return
        count = torch.tensor([len(mine)], dtype=torch.int64)
        if int(_ops.allreduce(count, op=_ops.Max, name="elastic.sampler.recorded")) == 0:
            return
        every = _ops.allgather(torch.from_numpy(mine), name="elastic.sampler.indices")
        self._processed[every.numpy()] = True
