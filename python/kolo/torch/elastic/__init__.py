"""Horovod's elastic training for PyTorch (``horovod.torch.elastic``): ``run``,
``TorchState``, ``ElasticSampler``. Under elastic kolorun a training function survives
hosts that leave or join: kolo restarts the workers and resumes from the newest commit
(kolo.common.elastic; docs/elastic.md).

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            for batch_idx, (data, target) in enumerate(loader):
                ...
                state.sampler.record_batch(batch_idx, batch_size)
                if batch_idx % 100 == 0:
                    state.commit()
            state.sampler.set_epoch(state.epoch + 1)

    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0)
    train(state)
"""
from kolo.common.elastic import ObjectState, State, run_fn  # noqa: F401
from kolo.common.exceptions import HostsUpdatedInterrupt  # noqa: F401
from kolo.torch.elastic.sampler import ElasticSampler
from kolo.torch.elastic.state import TorchState


def run(func):
    """Decorator of an elastic training function ``func(state, *args, **kwargs)``: syncs
    ``state`` (under elastic kolorun: from the newest commit of any rank, after a
    restart) and calls ``func``. Under elastic kolorun a HostsUpdatedInterrupt (raised by
    ``state.commit()``) ends every worker with exit code 0 for kolorun to restart them on
    the new hosts, and a failed collective ends this one with exit code 1 and one line;
    without it, errors propagate. As in Horovod, the function must not start with a
    collective (new ranks sync first)."""
    return run_fn(func)


__all__ = ["TorchState", "ElasticSampler", "run"]
