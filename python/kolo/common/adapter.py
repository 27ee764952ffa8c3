"""The adapter interface: what a framework gives kolo's collectives (kolo.common.collectives),
and nothing more. Keras 3's shape: the API is written once, a framework supplies primitives.

A binding subclasses :class:`Adapter` once (kolo.torch: ``kolo/torch/_tensors.py``; NumPy
arrays, which TensorFlow and JAX hand over too: ``kolo/common/host.py``) and gives:

- ``binding``: the module its users call ("kolo.torch"), named in errors
  ("use kolo.torch.Average");
- ``reader``: how the core reads its tensors (``engine.tensor_reader``: the protocol, the
  tensor class, its dtypes by the core's codes, ``refuse`` with the framework's words for
  each failed check, the CUDA stream of a device tensor);
- ``empty(shape, like)``: a new uninitialized tensor of ``shape`` with ``like``'s dtype and
  device (a result is written there);
- ``copy(tensor)``: a new tensor with ``tensor``'s values (broadcast into a new tensor);
- ``data_ptr(tensor)``: the address of a tensor ``empty`` made;
- ``int32_vector(values)``: a 1-D int32 tensor of ints (alltoall's received splits);
- ``split_list(splits)``: alltoall's ``splits`` argument as a list of ints, refusing what
  Horovod's binding refuses (None is the even split: an empty list).

From these the base class wraps results like their inputs (:meth:`Adapter.result`,
:meth:`Adapter.results`). Everything else — checks, ops, scale factors, process sets,
names, handles, refusals, objects — is kolo.common's."""


class Adapter:
    """A framework's primitives (see the module's docstring); subclass and fill in."""
    binding = None
    reader = None

    def empty(self, shape, like):
        raise NotImplementedError

    def empty_like(self, tensor):
        return self.empty(tuple(tensor.shape), tensor)

    def copy(self, tensor):
        raise NotImplementedError

    def data_ptr(self, tensor):
        raise NotImplementedError

    def int32_vector(self, values):
        raise NotImplementedError

    def split_list(self, splits):
        return [] if splits is None else [int(s) for s in splits]

    # Results like their inputs, from the primitives above.

    def result(self, out, like):
        """A finished operation's output as a new tensor with ``like``'s dtype and device
        (a CUDA tensor's result is in device memory on its device)."""
        tensor = self.empty(tuple(out.shape), like)
        out.copy_to(self.data_ptr(tensor), out.nbytes)
        return tensor

    def results(self, out, likes):
        """A grouped operation's outputs, one new tensor per input, as a tuple."""
        return tuple(self.result(o, like) for o, like in zip(out.take_parts(), likes))
