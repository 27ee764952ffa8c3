"""The names of a wrapped optimizer's parameters (both DistributedOptimizers): what their
reductions are called, checked as Horovod checks ``named_parameters``."""


def named(param_groups, named_parameters):
    """{parameter: name}, checked as Horovod checks it."""
    if named_parameters is None:
        return {p: "allreduce.noname.%d.%d" % (i, j)
                for i, group in enumerate(param_groups) for j, p in enumerate(group["params"])}
    if callable(named_parameters) and not hasattr(named_parameters, "__iter__"):
        raise TypeError("named_parameters must be a sequence of (name, parameter) tuples such "
                        "as model.named_parameters(); got the method itself: call it")
    pairs = list(named_parameters)
    if any(not isinstance(p, tuple) for p in pairs):
        raise ValueError("named_parameters should be a sequence of tuples (name, parameter), "
                         "usually produced by model.named_parameters().")
    names, duplicates = set(), set()
    for n, _ in pairs:
        (duplicates if n in names else names).add(n)
    if duplicates:
        raise ValueError("Parameter names in named_parameters must be unique. Found "
                         "duplicates: %s" % ", ".join(sorted(duplicates)))
    by_param = {p: n for n, p in pairs}
    unnamed = [id(p) for g in param_groups for p in g["params"] if p not in by_param]
    if unnamed:
        raise ValueError("named_parameters was specified, but one or more model parameters "
                         "were not named (pass model.named_parameters() of the model whose "
                         "parameters the optimizer has). Python object ids: %s"
                         % ", ".join(str(i) for i in unnamed))
    return by_param
