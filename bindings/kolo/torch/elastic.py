"""Horovod's elastic training (``horovod.torch.elastic``) is not supported.

The module exists so that ``import kolo.torch as hvd`` scripts fail where
they use it, with what to do instead, not with an AttributeError.
"""

NOT_SUPPORTED = (
    "kolo does not support elastic training (horovod.torch.elastic: run, TorchState, "
    "ElasticSampler; horovodrun --min-np/--max-np/--host-discovery-script). Run a fixed "
    "number of ranks under kolorun and resume from a checkpoint to change it: save on rank 0 "
    "(torch.save of model and optimizer state_dict()), then after a restart load on rank 0 "
    "and call hvd.broadcast_parameters(model.state_dict(), root_rank=0) and "
    "hvd.broadcast_optimizer_state(optimizer, root_rank=0).")

__all__ = ["TorchState", "ElasticSampler", "run"]


def run(func):
    """Horovod's decorator for an elastic training function: raises NotImplementedError."""
    raise NotImplementedError(NOT_SUPPORTED)


class TorchState:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError(NOT_SUPPORTED)


class ElasticSampler:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError(NOT_SUPPORTED)


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise NotImplementedError(NOT_SUPPORTED)
