"""Process sets (Horovod's ``horovod.torch`` exports them from ``horovod.common``): one
registry shared by every kolo binding in the process, since they share one runtime."""
from kolo.common.process_sets import (  # noqa: F401
    ProcessSet, _set_rank, _set_size, add_process_set, global_process_set, remove_process_set)
