"""``kolo.keras.callbacks``: the callbacks of ``kolo.tensorflow.keras.callbacks``."""
from kolo.tensorflow.keras.callbacks import (  # noqa: F401
    BestModelCheckpoint, BroadcastGlobalVariablesCallback, LearningRateScheduleCallback,
    LearningRateWarmupCallback, MetricAverageCallback)
