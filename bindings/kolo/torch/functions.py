"""Broadcasting and gathering Python objects and optimizer state."""
import io
import pickle

import torch

import kolo.torch as _kt


def broadcast_object(obj, root_rank=0, name=None, process_set=None):
    """Returns ``obj`` from ``root_rank`` on every rank (pickled; size first, then bytes)."""
    name = name or "broadcast_object"
    if _kt.rank() == root_rank:
        buf = io.BytesIO()
        torch.save(obj, buf)
        payload = torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)
        size = torch.tensor([payload.numel()], dtype=torch.int64)
    else:
        size = torch.zeros(1, dtype=torch.int64)
    _kt.broadcast_(size, root_rank, name=name + ".size", process_set=process_set)
    if _kt.rank() != root_rank:
        payload = torch.empty(int(size.item()), dtype=torch.uint8)
    _kt.broadcast_(payload, root_rank, name=name + ".data", process_set=process_set)
    if _kt.rank() == root_rank:
        return obj
    return torch.load(io.BytesIO(payload.numpy().tobytes()))


def allgather_object(obj, name=None, process_set=None):
    """Returns the list of every rank's ``obj``, in rank order."""
    name = name or "allgather_object"
    data = pickle.dumps(obj)
    payload = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else \
        torch.empty(0, dtype=torch.uint8)
    sizes = _kt.allgather(torch.tensor([len(data)], dtype=torch.int64), name=name + ".sizes",
                          process_set=process_set)
    gathered = _kt.allgather(payload, name=name + ".data", process_set=process_set)
    out, offset = [], 0
    raw = gathered.numpy().tobytes()
    for n in sizes.tolist():
        out.append(pickle.loads(raw[offset:offset + n]))
        offset += n
    return out


def broadcast_optimizer_state(optimizer, root_rank):
    """Makes every rank's optimizer state (including scalars, and state that is still empty
    before the first step) equal to ``root_rank``'s."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("broadcast_optimizer_state does not support LBFGS")
    state = broadcast_object(optimizer.state_dict(), root_rank,
                             name="broadcast_optimizer_state")
    if _kt.rank() != root_rank:
        optimizer.load_state_dict(state)
