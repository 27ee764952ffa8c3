"""Which gradients travel together, and which stay: Horovod's ``groups`` setting and its
local variables, on lists of any framework's gradients and variables.

The gradient reductions of a binding (a gradient tape, a DistributedOptimizer) keep the
framework's work (reducing a list of tensors) and take from here the bookkeeping around
it: the order in which the gradients travel and the sizes of the groups negotiated as
units, the variables whose gradients are not reduced, and putting reduced items back in
their places.
"""


def group_order(count, groups, variables):
    """The order in which ``count`` gradients travel and the sizes of the consecutive
    groups that are negotiated as units. ``groups`` is Horovod's: None or 0 (one group), a
    number of groups of near-equal size, or lists of variables whose gradients go together
    (``variables[i]`` is gradient i's; the others travel in one more group)."""
    order = list(range(count))
    if groups is None or groups == 0:
        return order, [count]
    if isinstance(groups, int):
        if groups < 0:
            raise ValueError("groups must be a positive number or a list of variable lists")
        n = min(groups, count)
        return order, [count // n + (1 if i < count % n else 0) for i in range(n)]
    if variables is None:
        raise ValueError("groups given as lists of variables need the variables")
    position = {id(v): i for i, v in enumerate(variables)}
    order, sizes = [], []
    for group in groups:
        members = [position[id(v)] for v in group if id(v) in position]
        order.extend(members)
        sizes.append(len(members))
    rest = [i for i in range(count) if i not in set(order)]
    order.extend(rest)
    sizes.append(len(rest))
    return order, [s for s in sizes if s]


def replace_at(items, indices, reduce):
    """A copy of ``items`` whose items at ``indices`` are replaced by ``reduce`` of them (a
    list in the order of ``indices`` in, one out); ``reduce`` is not called for none."""
    out = list(items)
    if indices:
        for i, r in zip(indices, reduce([items[i] for i in indices])):
            out[i] = r
    return out


class LocalVariables:
    """Variables registered as local to this rank (Horovod's ``register_local_source`` and
    ``register_local_var``, for model-parallel layers): their gradients are not reduced.
    Kept by identity, since not every framework's variables hash by value."""

    def __init__(self):
        self._by_id = {}  # id -> the variable, kept alive so that its id stays its own

    def add(self, variable):
        self._by_id[id(variable)] = variable

    def __contains__(self, variable):
        return id(variable) in self._by_id

    def __len__(self):
        return len(self._by_id)
