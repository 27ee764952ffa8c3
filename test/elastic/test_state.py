"""State, ObjectState, HandlerState and TorchState semantics, and run without elastic
kolorun, in one process (kolo at one rank): Horovod's test_torch_elastic.py checks, and
kolo's own (restore returns copies; the optimizer's state; the store only in memory)."""
import os

import pytest
import torch

import kolo.torch as hvd
from kolo.common.elastic import HandlerState, ObjectState, State, StateHandler
from kolo.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt


@pytest.fixture(autouse=True)
def plain(monkeypatch, tmp_path):
    hvd.init()
    monkeypatch.delenv("KOLO_ELASTIC", raising=False)
    monkeypatch.setenv("KOLO_ELASTIC_DIR", str(tmp_path))  # must stay empty


def test_object_state_save_restore_sync():
    s = ObjectState(hvd.broadcast_object, hvd.rank, epoch=1, names=["a"])
    assert s.epoch == 1 and s.names == ["a"]
    s.epoch = 2
    s.restore()  # never saved: the values given
    assert s.epoch == 1
    s.epoch, s.names = 3, ["a", "b"]
    s.commit()
    s.names.append("c")  # changed in place after the commit: restore undoes it too
    s.epoch = 4
    s.restore()
    assert s.epoch == 3 and s.names == ["a", "b"]
    s.sync()
    assert s.epoch == 3 and s._commit == 0


def test_horovods_torch_state_test():
    model1 = torch.nn.Sequential(torch.nn.Linear(2, 2))
    model1.load_state_dict({"0.weight": torch.ones(2, 2), "0.bias": torch.ones(2)})
    model2 = torch.nn.Sequential(torch.nn.Linear(2, 2))
    model2.load_state_dict({"0.weight": torch.tensor([[1.0, 2.0], [3.0, 4.0]]),
                            "0.bias": torch.zeros(2)})
    optimizer = torch.optim.SGD(model1.parameters(), lr=0.001 * hvd.size())
    state = hvd.elastic.TorchState(model1, optimizer, batch=20, epoch=10)
    state.sync()
    model1_weights = [w.clone() for w in model1.state_dict().values()]
    model2_weights = [w.clone() for w in model2.state_dict().values()]
    model1.load_state_dict(model2.state_dict())
    state.batch, state.epoch = 21, 11
    state.restore()
    for w1, w2 in zip(model1.state_dict().values(), model1_weights):
        assert torch.equal(w1, w2)
    assert (state.batch, state.epoch) == (20, 10)
    model1.load_state_dict(model2.state_dict())
    state.batch, state.epoch = 21, 11
    state.commit()
    state.restore()
    for w1, w2 in zip(model1.state_dict().values(), model2_weights):
        assert torch.equal(w1, w2)
    assert (state.batch, state.epoch) == (21, 11)


def test_optimizer_and_sampler_state_come_back():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3).double()
    opt = torch.optim.Adam(model.parameters(), lr=0.1, weight_decay=0.01)
    sampler = hvd.elastic.ElasticSampler(list(range(20)))
    state = hvd.elastic.TorchState(model, opt, sampler=sampler, step=0)

    def step():
        opt.zero_grad()
        model(torch.ones(2, 4, dtype=torch.float64)).pow(2).sum().backward()
        opt.step()
    step()
    sampler.record_batch(0, 3)
    state.step = 1
    state.commit()
    want = {k: v.clone() for k, v in model.state_dict().items()}
    want_opt = {k: v.clone() for k, v in opt.state_dict()["state"][0].items()}
    step()
    sampler.record_batch(1, 3)
    state.restore()
    assert all(torch.equal(model.state_dict()[k], v) for k, v in want.items())
    got_opt = opt.state_dict()["state"][0]
    assert all(torch.equal(got_opt[k], v) for k, v in want_opt.items())
    assert sampler.processed_num == 3 and state.step == 1
    # The restored optimizer state is its own, not the store's memory: stepping after a
    # restore and committing again does not change what the next restore loads.
    step()
    state.commit()
    after = {k: v.clone() for k, v in model.state_dict().items()}
    step()
    state.restore()
    assert all(torch.equal(model.state_dict()[k], v) for k, v in after.items())


def test_assigning_a_new_model_is_committed_by_the_next_commit():
    state = hvd.elastic.TorchState(torch.nn.Linear(2, 2))
    other = torch.nn.Linear(2, 2)
    state.model = other
    state.commit()
    want = other.weight.detach().clone()
    with torch.no_grad():
        other.weight.add_(1)
    state.restore()
    assert state._handlers["model"].value is other and torch.equal(other.weight, want)


def test_a_handler_state_of_the_users_own():
    # What TorchState and the TensorFlow states share: handlers synced in their order,
    # snapshots committed beside the plain objects, an attribute's new object committed.
    synced = []

    class Box:  # what StateHandler's default snapshot and load call
        def __init__(self, v):
            self.v = v

        def state_dict(self):
            return {"v": self.v}

        def load_state_dict(self, d):
            self.v = d["v"]

    class First(StateHandler):
        sync_first = True

        def sync(self, root_rank):
            synced.append(("first", root_rank))

    class Later(StateHandler):
        def sync(self, root_rank):
            synced.append(("later", root_rank))

    a, b = Box(1), Box(2)
    state = HandlerState({"b": Later(b), "a": First(a)}, hvd.broadcast_object, hvd.rank,
                         step=0)
    assert state.a is a and state.b is b and state.step == 0
    state.sync()
    assert synced == [("first", 0), ("later", 0)]
    a.v = 5
    state.restore()  # before a commit: the state at construction
    assert a.v == 1
    state.b, state.step = Box(7), 1
    state.commit()
    state.b.v, state.step = 8, 2
    state.restore()
    assert state.b.v == 7 and state.step == 1 and state._handlers["b"].value is state.b


def test_reset_callbacks_and_a_custom_state():
    calls = []

    class Counter(State):  # a user's State without a snapshot: commits in its own memory
        def __init__(self):
            super().__init__(bcast_object=hvd.broadcast_object, get_rank=hvd.rank)
            self.value = self.saved = 0

        def save(self):
            self.saved = self.value

        def restore(self):
            self.value = self.saved

        def sync(self):
            calls.append("sync")

        def reset(self):
            calls.append("reset")

    s = Counter()
    s.register_reset_callbacks([lambda: calls.append("callback")])
    s.value = 5
    s.commit()
    s.value = 6
    s.restore()
    assert s.value == 5
    s.on_reset()
    assert calls == ["reset", "callback"]


def test_run_without_elastic_kolorun(tmp_path):
    state = ObjectState(hvd.broadcast_object, hvd.rank, attempts=0)
    callbacks = []
    state.register_reset_callbacks([lambda: callbacks.append(state.attempts)])

    @hvd.elastic.run
    def train(state, limit):
        state.attempts += 1
        state.commit()  # no host updates without elastic kolorun: no collective, no raise
        if state.attempts < limit:
            raise HostsUpdatedInterrupt(skip_sync=True)  # Horovod's loop, without reset
        return state.attempts

    assert train.__name__ == "train"
    assert train(state, 3) == 3 and callbacks == [1, 2]

    @hvd.elastic.run
    def broken(state):
        raise HorovodInternalError("a collective failed")

    with pytest.raises(HorovodInternalError, match="a collective failed"):
        broken(state)  # propagates: no restart possible without elastic kolorun
    with pytest.raises(ZeroDivisionError):
        hvd.elastic.run(lambda state: 1 / 0)(state)
    assert os.listdir(tmp_path) == []  # commits stayed in memory


def test_interrupt_says_whether_to_skip_the_sync():
    e = HostsUpdatedInterrupt(True)
    assert e.skip_sync is True and isinstance(e, RuntimeError)
    assert hvd.elastic.__all__ == ["TorchState", "ElasticSampler", "run"]
