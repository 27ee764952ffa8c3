"""Images per second of a keras.applications model on synthetic data, trained data-parallel
with kolo.tensorflow (Horovod's tensorflow2_synthetic_benchmark.py, same flags).

    kolorun -np 2 .venv/bin/python examples/tensorflow2_synthetic_benchmark.py --model ResNet50
    ... --image-size 64     smaller images (Horovod's is fixed at 224)
    ... --eager             run the step eagerly instead of inside tf.function
"""
import argparse
import timeit

import numpy as np
import tensorflow as tf
import keras

import kolo.tensorflow as hvd


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--fp16-allreduce", action="store_true",
                        help="compress gradients to float16 for the allreduce")
    parser.add_argument("--model", default="ResNet50", help="a keras.applications name")
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--num-warmup-batches", type=int, default=10,
                        help="batches that do not count towards the result")
    parser.add_argument("--num-batches-per-iter", type=int, default=10)
    parser.add_argument("--num-iters", type=int, default=10)
    parser.add_argument("--use-tf-function", action=argparse.BooleanOptionalAction, default=True,
                        help="trace the training step with tf.function")
    parser.add_argument("--eager", dest="use_tf_function", action="store_false",
                        help="the same as --no-use-tf-function")
    parser.add_argument("--threads", type=int, default=0,
                        help="TF intra-op threads per rank (0: leave TF's default)")
    args = parser.parse_args()

    hvd.init()
    if args.threads > 0:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    if not hasattr(keras.applications, args.model):
        raise SystemExit("unknown model '%s'; see keras.applications" % args.model)
    model = getattr(keras.applications, args.model)(
        weights=None, input_shape=(args.image_size, args.image_size, 3))
    opt = keras.optimizers.SGD(0.01 * hvd.size())
    opt.build(model.trainable_variables)  # its variables exist before the first traced step
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none

    data = tf.random.uniform([args.batch_size, args.image_size, args.image_size, 3])
    target = tf.random.uniform([args.batch_size, 1], minval=0, maxval=999, dtype=tf.int64)

    def benchmark_step(first_batch):
        with tf.GradientTape() as tape:
            probs = model(data, training=True)
            loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(target, probs))
        # Horovod: the tape averages the gradients over all ranks.
        tape = hvd.DistributedGradientTape(tape, compression=compression)
        gradients = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(gradients, model.trainable_variables))
        # Horovod: after the first step, every rank takes rank 0's weights and optimizer
        # state (broadcast after the first step, so that the optimizer's state exists).
        if first_batch:
            hvd.broadcast_variables(model.variables, root_rank=0)
            hvd.broadcast_variables(opt.variables, root_rank=0)

    if args.use_tf_function:
        benchmark_step = tf.function(benchmark_step)

    def log(text):
        if hvd.rank() == 0:
            print(text, flush=True)

    log("Model: %s, batch size %d per rank at %d px, ranks: %d, %s, allreduce: %s" % (
        args.model, args.batch_size, args.image_size, hvd.size(),
        "tf.function" if args.use_tf_function else "eager",
        "fp16" if args.fp16_allreduce else "float32"))
    log("Running warmup...")
    benchmark_step(first_batch=True)
    timeit.timeit(lambda: benchmark_step(first_batch=False), number=args.num_warmup_batches)

    log("Running benchmark...")
    rates = []
    for i in range(args.num_iters):
        t = timeit.timeit(lambda: benchmark_step(first_batch=False),
                          number=args.num_batches_per_iter)
        rate = args.batch_size * args.num_batches_per_iter / t
        log("Iter #%d: %.1f img/sec per rank" % (i, rate))
        rates.append(rate)
    mean, spread = np.mean(rates), 1.96 * np.std(rates)
    log("Img/sec per rank: %.1f +-%.1f" % (mean, spread))
    log("Total img/sec on %d rank(s): %.1f +-%.1f" % (hvd.size(), hvd.size() * mean,
                                                    hvd.size() * spread))
    hvd.shutdown()


if __name__ == "__main__":
    main()
