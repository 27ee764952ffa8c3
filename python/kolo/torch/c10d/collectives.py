"""What each torch.distributed collective becomes on kolo (see the package's __init__.py):
the collective methods of KoloProcessGroup, as a mixin over its naming (``_name``), its
start of a Work (``_start``) and its kolo process set (``_set_id``). Tensors reach the
engine with the torch adapter's reader (kolo.torch._tensors), which reads and checks them
in C++, and results come back through the adapter."""
import torch
import torch.distributed as dist

from kolo.common import engine as _engine
from kolo.torch import _tensors
from kolo.torch._tensors import ADAPTER as _ADAPTER, READER as _READER
from kolo.torch.c10d.work import KoloWork, _PREFIX, caller_waits

_R = _engine.REDUCE_OPS
_OPS = {
    dist.ReduceOp.SUM: _R["sum"],
    dist.ReduceOp.AVG: _R["average"],
    dist.ReduceOp.MIN: _R["min"],
    dist.ReduceOp.MAX: _R["max"],
    dist.ReduceOp.PRODUCT: _R["product"],
}


def _op_code(opts, what):
    """The kolo reduce op of the call's options (SUM without them)."""
    op = getattr(opts, "reduceOp", dist.ReduceOp.SUM)
    op = getattr(op, "op", op)  # a ReduceOp object, or its RedOpType
    for known, code in _OPS.items():
        if op == known:
            return code
    raise NotImplementedError(
        _PREFIX + "%s with %s is not supported; kolo reduces with SUM, AVG, MIN, MAX and "
        "PRODUCT" % (what, op))


def _root(opts):
    return int(getattr(opts, "rootRank", 0))


def _check(tensor, what):
    """The reader's checks, for a tensor used before the collective that reads it."""
    _READER.check(tensor, _PREFIX + what)


def _flat(tensor):
    """One element (a view) for a 0-d tensor, which kolo's allgather, broadcast and alltoall
    do not take (its allreduce does)."""
    return tensor if tensor.dim() > 0 else tensor.view(1)


def _copy_result(out, dest):
    """Copies a finished kolo operation's output into ``dest`` (any layout)."""
    _tensors.copy_into(out, dest, "kolo's torch.distributed backend")


class ProcessGroupCollectives:
    """The data collectives of a KoloProcessGroup."""

    def _enqueue(self, start, opts, *args):
        """Starts the engine's ``start`` on the group's kolo set, with the torch reader: its
        handle, or, when the caller waits at once (work.caller_waits), the finished
        operation's Output, started and waited for in one call into the core (an error of
        the operation then raises here, in the call that torch.distributed waits on)."""
        return start(_READER, *args, self._set_id, waits=caller_waits(opts))

    def _allreduce(self, t, what, name, op, opts):
        """An allreduce of ``t`` in place, started."""
        return self._enqueue(_engine.allreduce_async, opts, t, None, _PREFIX + what,
                             self._name(name, t), op, 1.0, 1.0)

    # allreduce ------------------------------------------------------------------------

    def allreduce(self, tensors, opts=None):
        op = _op_code(opts, "allreduce")
        if len(tensors) == 1 and tensors[0].is_sparse:
            return self._sparse_allreduce(tensors[0], op, opts)
        if len(tensors) != 1:
            return self.allreduce_coalesced(tensors, opts)
        h = self._allreduce(tensors[0], "allreduce tensor 0", "allreduce", op, opts)
        return self._start("allreduce", h, lambda out: tensors, opts)

    def _sparse_allreduce(self, t, op, opts):
        """A sparse COO tensor, summed in place as gloo does: every rank's indices and values
        are gathered (one grouped kolo allgather; ranks may hold different numbers of
        entries) and added up locally."""
        if op != _R["sum"]:
            raise NotImplementedError(_PREFIX + "a sparse all_reduce sums (ReduceOp.SUM), as "
                                      "gloo's")
        c = t.coalesce()
        indices = c.indices().t().contiguous()  # [nnz, sparse dims]
        values = c.values().contiguous()  # [nnz, dense shape...]
        _check(values, "sparse all_reduce values")

        def finish(out):
            all_indices, all_values = _ADAPTER.results(out, (indices, values))
            total = torch.sparse_coo_tensor(all_indices.t(), all_values, t.shape).coalesce()
            with torch.no_grad():
                t.copy_(total)
            return [t]
        h = self._enqueue(_engine.grouped_allgather_async, opts, (indices, values),
                          _PREFIX + "sparse all_reduce", self._name("grouped_allgather"))
        return self._start("sparse all_reduce", h, finish, opts)

    def allreduce_coalesced(self, tensors, opts=None):
        """One grouped kolo allreduce of the list, in place: one call into the core, which
        reads and checks every tensor (as kolo.torch's grouped_allreduce_)."""
        op = _op_code(opts, "allreduce_coalesced")
        tensors = tuple(tensors)  # the caller's list may change after the call
        h = self._enqueue(_engine.grouped_allreduce_async, opts, tensors, None,
                          _PREFIX + "allreduce_coalesced", self._name("grouped_allreduce"),
                          op, 1.0, 1.0)
        return self._start("allreduce_coalesced", h, lambda out: list(tensors), opts)

    # broadcast ------------------------------------------------------------------------

    def broadcast(self, tensors, opts=None):
        started = []
        for i, t in enumerate(tensors):
            _check(t, "broadcast tensor %d" % i)
            h = self._enqueue(_engine.broadcast_async, opts, _flat(t),
                              _PREFIX + "broadcast tensor %d" % i, _root(opts),
                              self._name("broadcast"))
            started.append(("broadcast", h, lambda out: None))
        return self._all_of("broadcast", started, tensors, opts)

    def _all_of(self, what, started, result, opts):
        """One Work for several operations, each ``(what, handle, finish)``: completion
        threads finish all but the last; the last one's Work has ``result`` once every one
        has finished (or the first error)."""
        earlier = [KoloWork(w, w, h, finish).start() for w, h, finish in started[:-1]]
        _, handle, finish = started[-1]

        def finish_all(out):
            finish(out)
            for work in earlier:
                work.wait()
            return result
        return self._start(what, handle, finish_all, opts)

    # allgather and gather -------------------------------------------------------------

    def _allgather_handle(self, t, opts):
        _check(t, "allgather input")
        return self._enqueue(_engine.allgather_async, opts, t.reshape(1, t.numel()),
                             _PREFIX + "allgather input", self._name("allgather"))

    def _gather(self, what, output_tensors, t, opts, root=None):
        """Every rank's ``t`` into ``output_tensors[0]`` (one per rank): on every rank, or
        on ``root`` only."""
        def finish(out):
            if root is None or self.rank() == root:
                self._scatter_rows(out, t, output_tensors[0])
            return output_tensors
        return self._start(what, self._allgather_handle(t, opts), finish, opts)

    def _scatter_rows(self, out, like, outs):
        """Copies a gathered result (one row of ``like``'s size per rank) into ``outs``."""
        for row, o in zip(_ADAPTER.result(out, like), outs):
            o.copy_(row.view(o.shape))

    def allgather(self, output_tensors, input_tensors, opts=None):
        if len(input_tensors) != 1:
            raise NotImplementedError(_PREFIX + "allgather takes one input tensor per process")
        if len(output_tensors[0]) != self.size():
            raise ValueError("allgather: %d output tensors for a group of %d"
                             % (len(output_tensors[0]), self.size()))
        return self._gather("allgather", output_tensors, input_tensors[0], opts)

    def gather(self, output_tensors, input_tensors, opts=None):
        return self._gather("gather", output_tensors, input_tensors[0], opts, _root(opts))

    def all_gather_single(self, output, input, opts=None):
        h = self._allgather_handle(input, opts)
        return self._start("all_gather_into_tensor", h,
                           lambda out: [_copy_result(out, output), output][1], opts)

    _allgather_base = all_gather_single

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        """all_gather_into_tensor under the coalescing manager: one grouped kolo allgather
        (one call into the core, negotiated and moved as one unit), every part copied into
        its output. A rank's rows are its input's bytes whatever its shape, so the inputs go
        as they are (0-d ones as one element). With an empty input, one allgather each."""
        if any(i.numel() == 0 for i in inputs):
            started = [("allgather", self._allgather_handle(i, opts),
                        lambda out, o=o: _copy_result(out, o)) for i, o in zip(inputs, outputs)]
            return self._all_of("allgather_into_tensor_coalesced", started, outputs, opts)

        flat = [_flat(i) for i in inputs]

        def finish(out, _keep=flat):  # the inputs stay alive until the core read them
            for part, o in zip(out.take_parts(), outputs):
                _copy_result(part, o)
            return outputs
        h = self._enqueue(_engine.grouped_allgather_async, opts, flat,
                          _PREFIX + "all_gather_into_tensor (coalesced)",
                          self._name("grouped_allgather"))
        return self._start("allgather_into_tensor_coalesced", h, finish, opts)

    all_gather_single_coalesced = allgather_into_tensor_coalesced

    def allgather_coalesced(self, output_lists, inputs, opts=None):
        """dist.all_gather_coalesced: ``output_lists[r][i]`` gets rank r's ``inputs[i]``;
        one grouped kolo allgather (negotiated and run as one unit). Empty tensors, which
        have nothing to gather, are left out on every rank alike."""
        if len(output_lists) != self.size():
            raise ValueError("all_gather_coalesced: %d output lists for a group of %d"
                             % (len(output_lists), self.size()))
        for outs in output_lists:
            if len(outs) != len(inputs):
                raise ValueError("all_gather_coalesced: an output list holds %d tensors for "
                                 "%d inputs" % (len(outs), len(inputs)))
        for i, t in enumerate(inputs):
            _check(t, "all_gather_coalesced input %d" % i)
        full = [i for i, t in enumerate(inputs) if t.numel() > 0]
        if not full:
            raise ValueError("all_gather_coalesced: every input tensor is empty")

        def finish(out):
            for i, part in zip(full, out.take_parts()):
                self._scatter_rows(part, inputs[i], [outs[i] for outs in output_lists])
            return [o for outs in output_lists for o in outs]
        h = self._enqueue(_engine.grouped_allgather_async, opts,
                          [inputs[i].reshape(1, inputs[i].numel()) for i in full],
                          _PREFIX + "all_gather_coalesced", self._name("grouped_allgather"))
        return self._start("all_gather_coalesced", h, finish, opts)

    # reduce_scatter -------------------------------------------------------------------

    def _reduce_scatter(self, output, rows, op, what, opts):
        """Rank i of the group gets row i of the reduction of ``rows`` (size × numel):
        started, ``(what, handle, finish)``."""
        if op in (_R["sum"], _R["average"]):
            h = self._enqueue(_engine.reducescatter_async, opts, rows, _PREFIX + what,
                              self._name(what), op, 1.0, 1.0)
            return what, h, lambda out, _keep=rows: [_copy_result(out, output), [output]][1]
        # MIN, MAX, PRODUCT: kolo's reducescatter sums; reduce everything, keep our row.
        h = self._allreduce(rows, what, what, op, opts)

        def finish(out):
            output.copy_(rows[self.rank()].view(output.shape))
            return [output]
        return what, h, finish

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        op = _op_code(opts, "reduce_scatter")
        if len(output_tensors) != 1:
            raise NotImplementedError(_PREFIX + "reduce_scatter takes one output tensor per "
                                      "process")
        output, inputs = output_tensors[0], input_tensors[0]
        _check(output, "reduce_scatter output")
        if len(inputs) != self.size() or any(i.numel() != output.numel() for i in inputs):
            raise ValueError("reduce_scatter: needs %d input tensors with the output's %d "
                             "elements each" % (self.size(), output.numel()))
        rows = torch.stack([i.reshape(-1) for i in inputs])
        return self._start(*self._reduce_scatter(output, rows, op, "reduce_scatter", opts), opts)

    def reduce_scatter_single(self, output, input, opts=None):
        return self._start(*self._reduce_scatter_tensor(output, input, opts), opts)

    _reduce_scatter_base = reduce_scatter_single

    def _reduce_scatter_tensor(self, output, input, opts):
        op = _op_code(opts, "reduce_scatter_tensor")
        _check(input, "reduce_scatter_tensor input")
        if input.numel() != output.numel() * self.size():
            raise ValueError("reduce_scatter_tensor: the input has %d elements, it needs the "
                             "output's %d times the group's size %d"
                             % (input.numel(), output.numel(), self.size()))
        rows = input.view(self.size(), output.numel())
        if op not in (_R["sum"], _R["average"]):
            rows = rows.clone()  # reduced in place: the input stays as it was
        return self._reduce_scatter(output, rows, op, "reduce_scatter_tensor", opts)

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        """reduce_scatter_tensor under the coalescing manager: for SUM and AVG one grouped
        kolo reducescatter (one call into the core, one unit), each input seen as one row
        per rank; MIN, MAX and PRODUCT reduce each input whole (one allreduce each)."""
        op = _op_code(opts, "reduce_scatter_tensor")
        if op not in (_R["sum"], _R["average"]) or any(o.numel() == 0 for o in outputs):
            started = [self._reduce_scatter_tensor(o, i, opts) for o, i in zip(outputs, inputs)]
            return self._all_of("reduce_scatter_tensor_coalesced", started, outputs, opts)
        for k, (o, i) in enumerate(zip(outputs, inputs)):
            if not i.is_contiguous():
                _check(i, "reduce_scatter_tensor input %d" % k)  # names it
            if i.numel() != o.numel() * self.size():
                raise ValueError("reduce_scatter_tensor: input %d has %d elements, it needs "
                                 "its output's %d times the group's size %d"
                                 % (k, i.numel(), o.numel(), self.size()))
        rows = [i.view(self.size(), o.numel()) for o, i in zip(outputs, inputs)]

        def finish(out, _keep=rows):
            for part, o in zip(out.take_parts(), outputs):
                _copy_result(part, o)
            return outputs
        h = self._enqueue(_engine.grouped_reducescatter_async, opts, rows,
                          _PREFIX + "reduce_scatter_tensor (coalesced)",
                          self._name("grouped_reducescatter"), op, 1.0, 1.0)
        return self._start("reduce_scatter_tensor_coalesced", h, finish, opts)

    reduce_scatter_single_coalesced = reduce_scatter_tensor_coalesced

    # alltoall -------------------------------------------------------------------------

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes,
                          opts=None):
        _check(input, "all_to_all_single input")
        h = self._enqueue(_engine.alltoall_async, opts, _flat(input),
                          _PREFIX + "all_to_all_single input",
                          [int(s) for s in input_split_sizes], self._name("alltoall"))
        want = [int(s) for s in output_split_sizes]

        def finish(out):
            if want and list(out.received_splits) != want:
                raise RuntimeError("all_to_all_single: output_split_sizes %s, but the ranks "
                                   "sent %s rows" % (want, list(out.received_splits)))
            _copy_result(out, output)
            return [output]
        return self._start("all_to_all_single", h, finish, opts)

    alltoall_base = all_to_all_single

    def alltoall(self, output_tensors, input_tensors, opts=None):
        for i, t in enumerate(input_tensors):
            _check(t, "all_to_all input %d" % i)
        flat = torch.cat([t.reshape(-1) for t in input_tensors])
        h = self._enqueue(_engine.alltoall_async, opts, flat, _PREFIX + "all_to_all input",
                          [t.numel() for t in input_tensors], self._name("alltoall"))

        def finish(out):
            got = list(out.received_splits)
            want = [o.numel() for o in output_tensors]
            if got != want:
                raise RuntimeError("all_to_all: the output tensors hold %s elements, the "
                                   "ranks sent %s" % (want, got))
            for o, part in zip(output_tensors, _ADAPTER.result(out, flat).split(got)):
                o.copy_(part.view(o.shape))
            return output_tensors
        return self._start("all_to_all", h, finish, opts)

    # rooted collectives over the above ------------------------------------------------

    def reduce(self, tensors, opts=None):
        op = _op_code(opts, "reduce")
        t = tensors[0]
        _check(t, "reduce tensor")
        tmp = t.clone()
        h = self._allreduce(tmp, "reduce tensor", "reduce", op, opts)

        def finish(out):
            if self.rank() == _root(opts):
                t.copy_(tmp)
            return tensors
        return self._start("reduce", h, finish, opts)

    def scatter(self, output_tensors, input_tensors, opts=None):
        out = output_tensors[0]
        _check(out, "scatter output")
        if self.rank() == _root(opts):
            rows = torch.stack([i.reshape(-1) for i in input_tensors[0]])
        else:
            rows = torch.empty((self.size(), out.numel()), dtype=out.dtype, device=out.device)
        h = self._enqueue(_engine.broadcast_async, opts, rows, _PREFIX + "scatter input",
                          _root(opts), self._name("scatter"))

        def finish(_):
            out.copy_(rows[self.rank()].view(out.shape))
            return output_tensors
        return self._start("scatter", h, finish, opts)
