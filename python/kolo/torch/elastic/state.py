"""``TorchState``: a model, an optimizer, ElasticSamplers and plain objects, committed
together (Horovod's ``horovod.torch.elastic.state``, with the same handler registry)."""
import torch

from kolo.common import elastic_store as store
from kolo.common.elastic import ObjectState
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


class TorchState(ObjectState):
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
        self._handlers, kwargs = _get_handlers(kwargs)
        for name, handler in self._handlers.items():
            setattr(self, name, handler.value)
        super().__init__(bcast_object=broadcast_object, get_rank=rank, **kwargs)
        self._write_commit(store.NO_COMMIT)  # what restore() returns to before a commit

    def save(self):
        for handler in self._handlers.values():
            handler.before_save()
        super().save()

    def sync(self):
        # Optimizers first: one without state yet steps once with zero gradients (as
        # Horovod's broadcast_optimizer_state does), which weight decay turns into a
        # change of the parameters; the model's broadcast then undoes it.
        handlers = sorted(self._handlers.values(),
                          key=lambda h: not isinstance(h, OptimizerStateHandler))
        for handler in handlers:
            handler.sync(self._sync_root)
        super().sync()

    def __setattr__(self, name, value):
        handlers = self.__dict__.get("_handlers")
        if handlers and name in handlers:
            handlers[name].value = value  # committed by the next save()
        super().__setattr__(name, value)

    def _snapshot(self):
        tree = super()._snapshot()
        tree["handlers"] = {name: h.snapshot() for name, h in self._handlers.items()}
        return tree

    def _load_snapshot(self, tree):
        for name, handler in self._handlers.items():
            if name in tree["handlers"]:
                handler.load(tree["handlers"][name])
        super()._load_snapshot(tree)


class StateHandler:
    """How one kind of object is committed and synced: by default its ``state_dict()``
    is the snapshot and ``load_state_dict()`` loads it (models, optimizers, samplers)."""

    def __init__(self, value):
        self.value = value

    def before_save(self):
        """Called on every rank before a save (may be collective)."""

    def snapshot(self):
        return self.value.state_dict()

    def load(self, snapshot):
        self.value.load_state_dict(snapshot)

    def sync(self, root_rank):
        raise NotImplementedError()


class ModelStateHandler(StateHandler):
    def sync(self, root_rank):
        broadcast_parameters(self.value.state_dict(), root_rank=root_rank)


class OptimizerStateHandler(StateHandler):
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


def _get_handler(value):
    for handler_type, handler_class in _handler_registry:
        if isinstance(value, handler_type):
            return handler_class(value)
    return None


def _get_handlers(kwargs):
    handlers, remainder = {}, {}
    for key, value in kwargs.items():
        handler = _get_handler(value)
        if handler:
            handlers[key] = handler
        else:
            remainder[key] = value
    return handlers, remainder
