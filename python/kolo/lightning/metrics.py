"""torchmetrics on kolo's collectives.

A torchmetrics ``Metric`` syncs its states over torch.distributed, which KoloStrategy does
not start: made as ``Accuracy(..., **kolo.lightning.torchmetrics_kwargs())``, it gathers them
with kolo instead, so that ``compute()`` (and ``self.log("acc", metric)``) covers every
rank's samples.
"""
import kolo.torch as kt


def distributed_available():
    """More than one rank: torchmetrics then syncs before compute()."""
    return kt.is_initialized() and kt.size() > 1


def gather_all_tensors(tensor, group=None):
    """Every rank's ``tensor`` in rank order (shapes may differ between ranks): torchmetrics'
    ``dist_sync_fn``. ``group``: None (all ranks) or a kolo.torch.ProcessSet."""
    process_set = kt.global_process_set if group is None else group
    if not isinstance(process_set, kt.ProcessSet):
        raise ValueError("gather_all_tensors(group=%r): a kolo.torch.ProcessSet or None"
                         % (group,))
    parts = kt.allgather_object(tensor.detach().cpu(), name="torchmetrics.state",
                                process_set=process_set)
    return [part.to(tensor.device) for part in parts]


def torchmetrics_kwargs():
    """Keyword arguments for any torchmetrics ``Metric``: sync its states with kolo."""
    return {"dist_sync_fn": gather_all_tensors, "distributed_available_fn": distributed_available}
