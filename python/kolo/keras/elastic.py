"""``kolo.keras.elastic``: the same module as ``kolo.tensorflow.keras.elastic`` (Horovod's
``horovod.keras.elastic`` served standalone Keras 2; Keras 3 runs on TensorFlow here)."""
from kolo.tensorflow.keras.elastic import (  # noqa: F401
    CommitStateCallback, KerasState, UpdateBatchStateCallback, UpdateEpochStateCallback, run)

__all__ = ["KerasState", "CommitStateCallback", "UpdateBatchStateCallback",
           "UpdateEpochStateCallback", "run"]
