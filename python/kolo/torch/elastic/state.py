"""``TorchState``: a model, an optimizer, ElasticSamplers and plain objects, committed
together (Horovod's ``horovod.torch.elastic.state``, with the same handler registry)."""
import torch

from kolo.common import elastic_store as store
from kolo.common.elastic import HandlerState, StateHandler
from kolo.torch.elastic.sampler import ElasticSampler
from kolo.torch.functions import (
    broadcast_object, broadcast_optimizer_state, broadcast_parameters)
from kolo.torch.basics import rank


class TorchCodec(store.ArrayCodec):
    """Tensors (any dtype, any device) as a commit's leaves: their raw bytes are copied
    into the store, and come back as CPU tensors (moved back to their CUDA device when it
    exists)."""

    def leaf(self, obj):
        if not isinstance(obj, torch.Tensor):
            return super().leaf(obj)
        if obj.layout != torch.strided or obj.is_quantized:
            return None  # pickled with the tree
        flat = obj.detach().contiguous().reshape(-1)
        nbytes = flat.numel() * flat.element_size()
        tag = "torch:%s@%s" % (str(flat.dtype).replace("torch.", ""), flat.device)

        def write(dst):
            if nbytes:
                torch.from_numpy(dst).copy_(flat.view(torch.uint8))
        return tag, tuple(obj.shape), nbytes, write

    def make(self, tag, shape, raw):
        if not tag.startswith("torch:"):
            return super().make(tag, shape, raw)
        dtype, _, device = tag[len("torch:"):].partition("@")
        dtype = getattr(torch, dtype)
        if raw.size == 0:
            tensor = torch.empty(shape, dtype=dtype)
        else:
            tensor = torch.from_numpy(raw.copy()).view(dtype).reshape(shape)
        if device.startswith("cuda") and torch.cuda.is_available():
            tensor = tensor.to(device)
        return tensor


class TorchState(HandlerState):
    """State of a PyTorch training process (Horovod's ``TorchState``).

    Args:
        model: a ``torch.nn.Module`` (optional).
        optimizer: a ``torch.optim.Optimizer`` (optional).
        kwargs: more attributes: a model, optimizer or ElasticSampler (anything in the
            handler registry) is handled as such, anything else as a plain object.

    Every committed tensor's bytes are copied into a reused mapping (no pickling); before
    the first commit ``restore()`` returns to the state at construction.
    """
    _codec = TorchCodec()

    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(dict(model=model, optimizer=optimizer))
        handlers, kwargs = _get_handlers(kwargs)
        super().__init__(handlers, bcast_object=broadcast_object, get_rank=rank, **kwargs)


class ModelStateHandler(StateHandler):
    def sync(self, root_rank):
        broadcast_parameters(self.value.state_dict(), root_rank=root_rank)


class OptimizerStateHandler(StateHandler):
    # Synced before the model: an optimizer without state yet steps once with zero
    # gradients (as Horovod's broadcast_optimizer_state does), which weight decay turns
    # into a change of the parameters; the model's broadcast then undoes it.
    sync_first = True

    def sync(self, root_rank):
        broadcast_optimizer_state(self.value, root_rank=root_rank)


class SamplerStateHandler(StateHandler):
    def before_save(self):
        self.value._share_recorded()

    def sync(self, root_rank):
        self.value.load_state_dict(broadcast_object(self.value.state_dict(), root_rank,
                                                    name="elastic.sampler"))


_handler_registry = [
    (torch.nn.Module, ModelStateHandler),
    (torch.optim.Optimizer, OptimizerStateHandler),
    (ElasticSampler, SamplerStateHandler),
]


def get_handler_registry():
    return _handler_registry


def set_handler_registry(registry):
    global _handler_registry
    _handler_registry = registry


def _get_handlers(kwargs):
    """The handlers of the registry's types among ``kwargs``' values (the first type that
    matches), and the other values."""
    handlers, remainder = {}, {}
    for key, value in kwargs.items():
        handler = next((handler_class(value) for handler_type, handler_class
                        in _handler_registry if isinstance(value, handler_type)), None)
        if handler:
            handlers[key] = handler
        else:
            remainder[key] = value
    return handlers, remainder
