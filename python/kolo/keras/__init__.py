"""``import kolo.keras as hvd``: the same module as ``kolo.tensorflow.keras`` (Horovod's
``horovod.keras`` served standalone Keras 2; Keras 3 runs on TensorFlow here)."""
from kolo.tensorflow.keras import *  # noqa: F401,F403
from kolo.tensorflow.keras import (  # noqa: F401
    DistributedOptimizer, allgather, allreduce, broadcast, broadcast_global_variables,
    callbacks, elastic, load_model, reducescatter)
