"""The errors of Horovod's ``horovod.common.exceptions`` under their Horovod names.

``HorovodInternalError`` is kolo's ``KoloInternalError`` (a collective failed: the job's
MPI communicator is broken). ``HostsUpdatedInterrupt`` ends an elastic training function
at a commit when kolorun's hosts have changed (kolo.common.elastic)."""
from kolo.common.engine import KoloInternalError

HorovodInternalError = KoloInternalError


class HostsUpdatedInterrupt(RuntimeError):
    """The hosts changed: ``state.commit()`` or ``state.check_host_updates()`` raises it
    on every rank at once. ``skip_sync``: True when hosts were only removed (Horovod: the
    surviving ranks' state is consistent; kolo restarts the workers and loads the newest
    commit either way)."""

    def __init__(self, skip_sync):
        super().__init__(skip_sync)
        self.skip_sync = skip_sync


__all__ = ["HorovodInternalError", "HostsUpdatedInterrupt", "KoloInternalError"]
