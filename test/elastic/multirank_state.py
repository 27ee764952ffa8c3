"""TorchState and run across ranks under plain kolorun (-np 2 or more): commit, restore
and sync; record_indices shared at a commit; the agreement at the start of an elastic
incarnation (each rank's "host" is a directory of its own here) picks the newest commit
of any rank and syncs from the lowest rank that holds it; run without KOLO_ELASTIC.
Every rank runs every test in the same order."""
import os
import shutil
import uuid

import pytest
import torch

import kolo.torch as hvd
from kolo.common import elastic as common_elastic
from kolo.common import elastic_env
from kolo.common import elastic_store as store

hvd.init()
R, N = hvd.rank(), hvd.size()
torch.set_num_threads(1)


def make_model(value):
    model = torch.nn.Linear(3, 2).double()
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(value)
    return model


def values(model):
    return sorted({float(v) for p in model.parameters() for v in p.detach().reshape(-1)})


def test_sync_commit_restore_across_ranks():
    model = make_model(R + 1.0)
    opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    state = hvd.elastic.TorchState(model, opt, epoch=10 + R)
    state.sync()
    assert values(model) == [1.0] and state.epoch == 10, "rank %d: not rank 0's" % R
    assert "momentum_buffer" in opt.state_dict()["state"][0]  # Horovod's zero-grad step
    model(torch.ones(1, 3, dtype=torch.float64)).sum().backward()
    opt.step()
    state.epoch = 11
    state.commit()
    committed = values(model)
    with torch.no_grad():
        model.weight.add_(R + 5)
    state.epoch = 99
    state.restore()
    assert values(model) == committed and state.epoch == 11
    gathered = hvd.allgather_object((values(model), state.epoch))
    assert all(g == gathered[0] for g in gathered), gathered


def test_restore_after_sync_returns_to_the_synced_state_on_every_rank():
    # A restore before the first commit after a sync must not bring a rank back to its own
    # values from before the sync: the ranks would train apart.
    model = make_model(R + 1.0)
    opt = torch.optim.SGD(model.parameters(), lr=0.5 + R, momentum=0.9)
    sampler = hvd.elastic.ElasticSampler(list(range(40)), shuffle=True)
    sampler.set_epoch(3 + R)
    state = hvd.elastic.TorchState(model, opt, sampler=sampler, epoch=10 + R)
    objects = common_elastic.ObjectState(hvd.broadcast_object, hvd.rank, step=R)
    state.sync()
    objects.sync()
    synced_shard = list(sampler)  # this rank's part of epoch 3's order
    with torch.no_grad():
        model.weight.add_(R + 5)
    opt.param_groups[0]["lr"] = 9.0
    state.epoch, objects.step = 99, 99
    sampler.set_epoch(7)
    state.restore()
    objects.restore()
    assert values(model) == [1.0], "rank %d: not the synced parameters" % R
    assert opt.param_groups[0]["lr"] == 0.5 and state.epoch == 10 and objects.step == 0
    assert sampler.epoch == 3 and list(sampler) == synced_shard, "rank %d: sampler" % R
    gathered = hvd.allgather_object((sampler.epoch, values(model), state.epoch))
    assert all(g == gathered[0] for g in gathered), gathered


def test_record_indices_of_every_rank_are_in_every_commit():
    sampler = hvd.elastic.ElasticSampler(list(range(40)), shuffle=False)
    state = hvd.elastic.TorchState(sampler=sampler)
    state.sync()
    mine = list(sampler)[:3]
    sampler.record_indices(mine)
    if R == 0:
        sampler.record_indices([39])
    state.commit()
    everyone = hvd.allgather_object(mine)
    want = {i for part in everyone for i in part} | {39}
    assert sampler.processed_indices == want, "rank %d" % R
    sampler.record_batch(1, 3)  # lockstep: every rank's batch 1, computed locally
    state.commit()  # no rank recorded indices: one small allreduce only
    want |= {i for i in range(40) if i // N in (3, 4, 5)} & set(sampler.remaining_indices)
    state.restore()
    assert sampler.processed_indices == want and len(sampler) == -(-(40 - len(want)) // N)


@pytest.fixture
def hosts():
    """One directory per rank (the ranks' hosts), under a base that every rank knows."""
    base = hvd.broadcast_object("/tmp/kolo-elastic-test-" + uuid.uuid4().hex, 0)
    job = hvd.broadcast_object(uuid.uuid4().hex, 0)
    mine = os.path.join(base, "host%d" % R)

    def env(generation):
        return elastic_env.ElasticEnv(job, generation, ("127.0.0.1", 1), "t", mine)
    yield env, store.job_directory(mine, job)
    hvd.barrier()
    shutil.rmtree(mine, ignore_errors=True)
    if R == 0:
        hvd.barrier()
        shutil.rmtree(base, ignore_errors=True)
    else:
        hvd.barrier()


def commit_on_my_host(env, number, value):
    """As an earlier incarnation (generation 0) would have: this rank's commit ``number``
    of a model whose parameters are all ``value`` (nothing if number < 0)."""
    state = hvd.elastic.TorchState(make_model(value), step=number)
    if number >= 0:
        state._store.attach(store.job_directory(env.directory, env.job), 0, R)
        state._write_commit(number)


@pytest.mark.parametrize("case", ["last rank newest", "tie", "none"])
def test_the_agreement_loads_the_newest_commit_and_syncs_from_its_lowest_holder(hosts, case):
    env, my_dir = hosts
    number = {"last rank newest": 3 + (5 if R == N - 1 else 0), "tie": 4,
              "none": -1}[case]
    commit_on_my_host(env(0), number, 100.0 + R)
    resets = []
    state = hvd.elastic.TorchState(make_model(-1.0 - R), step=-1)
    state.register_reset_callbacks([lambda: resets.append(state.step)])
    commit = common_elastic._resume(env(1), state)
    want_commit, want_value = {"last rank newest": (8, 100.0 + N - 1), "tie": (4, 100.0),
                               "none": (-1, -1.0)}[case]
    assert commit == want_commit and state._commit == want_commit
    assert values(state.model) == [want_value] and state.step == want_commit, "rank %d" % R
    assert resets == ([] if want_commit < 0 else [want_commit])
    # This rank's store holds the resumed state under generation 1; generation 0's are gone.
    assert sorted(os.listdir(my_dir)) == ["g1-r%d-s0.commit" % R]
    key, _ = store.newest_in(my_dir)
    assert key == store.commit_key(1, want_commit) if want_commit >= 0 else key == -1
    state._store.close(remove=True)


def test_run_without_elastic_kolorun_syncs_from_rank_0_and_propagates_errors():
    assert elastic_env.read() is None
    state = hvd.elastic.TorchState(make_model(R + 1.0), epoch=R)

    @hvd.elastic.run
    def train(state):
        return values(state.model), state.epoch

    assert train(state) == ([1.0], 0)

    @hvd.elastic.run
    def failing(state):
        raise ValueError("rank %d fails" % hvd.rank())

    with pytest.raises(ValueError, match="rank %d fails" % R):
        failing(state)
