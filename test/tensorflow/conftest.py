"""Runs before any test module imports TensorFlow: quiet logs, no oneDNN rewrites (the
single-process references must see the same arithmetic as the ranks) and one thread per
pool, so that 3 ranks on 2 cores stay fast. Every rank runs every test in file order."""
import os
import sys

# test/common: the helpers that several test folders share (rank_values.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "common"))

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import tensorflow as tf  # noqa: E402

# The ranks of a host share its GPUs (test_tf_gpu.py): none takes all their memory.
for gpu in tf.config.list_physical_devices("GPU"):
    tf.config.experimental.set_memory_growth(gpu, True)
tf.config.threading.set_inter_op_parallelism_threads(1)
tf.config.threading.set_intra_op_parallelism_threads(1)
