"""kolo as a ``torch.distributed`` backend: ``import kolo.torch.c10d`` registers it under the
name ``"kolo"``, then ``dist.init_process_group(backend="kolo")`` runs DDP and the
``torch.distributed`` collectives on kolo's runtime (negotiation, fusion, the shared-memory
path, the stall inspector and the timeline).

Python-level only: a ``torch.distributed.ProcessGroup`` subclass whose methods hand
tensors to kolo's engine (``kolo.common.engine``) with the torch adapter's reader, which
reads them in C++, with no link against libtorch, so one kolo build serves every PyTorch
that has the extension points used here (``_MIN_TORCH``; checked at import).
docs/api-torch-distributed.md has what is supported, how DDP meets kolo and the names
that pair operations across ranks ("DDP"); docs/architecture.md what each module holds.
"""
import os

import torch
import torch.distributed as dist

from kolo.common import basics as _basics
from kolo.common import join as _join

# The oldest PyTorch this backend runs on; see _check_torch() for what it needs.
_MIN_TORCH = "2.1"


def _check_torch():
    """What the backend needs from PyTorch, each missing piece named."""
    missing = []
    if torch.__version__ < _MIN_TORCH:  # a TorchVersion: compared as a version
        missing.append("PyTorch >= " + _MIN_TORCH)
    if not dist.is_available():
        missing.append("torch.distributed (this PyTorch was built without it)")
    else:
        import inspect
        if not hasattr(dist, "_Work"):
            missing.append("torch.distributed._Work (Python Work objects)")
        try:
            params = inspect.signature(dist.Backend.register_backend).parameters
        except (TypeError, ValueError):
            params = {}
        for p in ("extended_api", "devices"):
            if p not in params:
                missing.append("Backend.register_backend(%s=...)" % p)
        if not hasattr(torch._C, "_current_graph_task_id"):
            missing.append("torch._C._current_graph_task_id (to name DDP's buckets)")
    if missing:
        raise ImportError(
            "kolo's torch.distributed backend needs %s; this is PyTorch %s. Use kolo.torch "
            "(DistributedOptimizer) with this PyTorch, or upgrade PyTorch."
            % (", ".join(missing), torch.__version__))


_check_torch()

# After the version check: these subclass what it checked for.
from kolo.torch.c10d.group import (  # noqa: E402
    BACKEND_NAME, KoloProcessGroup, _device_types, _sets)

_c10d = dist.distributed_c10d
# PyTorch asks the default process group for new groups on every rank (members or not)
# when it has a `new_group` method; older PyTorch calls the backend on members only, and
# kolo registers a set with every rank taking part.
_HAS_NEW_GROUP_HOOK = "new_group" in getattr(
    getattr(_c10d, "_new_group_with_tag", None), "__code__", compile("", "", "exec")).co_names


# --- creation ----------------------------------------------------------------------------

def _start_kolo(timeout, opts):
    """Starts kolo's runtime (collective over the kolorun job, or joining the ranks that
    torchrun or spawn started: kolo/common/join.py). PyTorch's timeout becomes
    kolo's stall shutdown time unless KOLO_STALL_SHUTDOWN_TIME_SECONDS is set or the
    timeout is PyTorch's default (kolo's own default, 10 minutes, is then kept)."""
    if _basics.is_initialized():
        return
    default = getattr(_c10d, "default_pg_timeout", None)
    if (timeout is not None and timeout != default
            and "KOLO_STALL_SHUTDOWN_TIME_SECONDS" not in os.environ):
        seconds = max(timeout.total_seconds(), 1.0)
        os.environ["KOLO_STALL_SHUTDOWN_TIME_SECONDS"] = "%g" % seconds
        # The warning naming the missing ranks comes half-way, unless set earlier.
        if float(os.environ.get("KOLO_STALL_CHECK_TIME_SECONDS", "60")) > seconds:
            os.environ["KOLO_STALL_CHECK_TIME_SECONDS"] = "%g" % (seconds / 2)
    _join.start(opts.store, opts.group_rank, opts.group_size, timeout)


def _create(opts, backend_options=None):
    """PyTorch's creator for backend "kolo" (extended API): one KoloProcessGroup."""
    ranks = sorted(int(r) for r in (opts.global_ranks_in_group or []))
    is_world = not ranks
    _start_kolo(opts.timeout, opts)
    size, rank = _basics.size(), _basics.rank()
    if is_world:
        if opts.group_size != size or opts.group_rank != rank:
            raise RuntimeError(
                "kolo's torch.distributed backend runs on kolo's job, in which this process "
                "is rank %d of %d, but torch.distributed was told rank %d of %d (RANK / "
                "WORLD_SIZE). Start the script with kolorun (kolorun -np N python "
                "script.py), which sets both." % (rank, size, opts.group_rank,
                                                 opts.group_size))
        ranks = list(range(size))
    set_id = 0 if ranks == list(range(size)) else _sets.get(tuple(ranks))
    if set_id is None:
        why = ("this PyTorch (%s) creates groups on their members only; use a PyTorch whose "
               "new_group() asks the default group on every rank (2.15 does)"
               % torch.__version__ if not _HAS_NEW_GROUP_HOOK else
               "it was made with use_local_synchronization=True, or the default group's "
               "backend is not kolo")
        raise NotImplementedError(
            "kolo's torch.distributed backend: dist.new_group(%s) needs every rank to take "
            "part in registering the group with kolo, but %s; or use backend=\"gloo\" for "
            "this group" % (ranks, why))
    return KoloProcessGroup(opts.group_rank, opts.group_size, set_id, str(opts.group_id),
                            ranks, opts.timeout)


if BACKEND_NAME.upper() not in getattr(dist.Backend, "_plugins", {}):
    dist.Backend.register_backend(BACKEND_NAME, _create, extended_api=True,
                                  devices=_device_types())


def autoload():
    """PyTorch's out-of-tree backend autoload (the ``torch.backends`` entry point of a
    pip-installed kolo) calls this during ``import torch``; importing this module has
    already registered the backend."""

