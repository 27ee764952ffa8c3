"""Images per second of a Flax ResNet-50 on synthetic data, trained data-parallel with
kolo.jax (Horovod's synthetic benchmarks, for JAX).

    JAX_PLATFORMS=cpu kolorun -np 2 .venv/bin/python examples/jax_synthetic_benchmark.py
    ... --image-size 64      smaller images (Horovod's are 224)
    ... --model gradients    no model: a jitted step that allreduces ResNet-50's 161 gradient
                             shapes (97.5 MiB float32) and applies SGD; reports steps/sec
    ... --no-allreduce       the same step with optax's plain SGD, for the allreduce's cost

The whole step (forward, backward, kj.DistributedOptimizer's allreduce, SGD) is one
jax.jit; the allreduce runs inside it as kolo.jax's ordered io_callback.
"""
import argparse
import os
import timeit

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
import flax.linen as nn  # noqa: E402

import kolo.jax as kj  # noqa: E402


class Bottleneck(nn.Module):
    planes: int
    strides: int = 1
    downsample: bool = False

    @nn.compact
    def __call__(self, x, train):
        norm = lambda: nn.BatchNorm(use_running_average=not train, momentum=0.9)  # noqa: E731
        y = nn.relu(norm()(nn.Conv(self.planes, (1, 1), use_bias=False)(x)))
        y = nn.relu(norm()(nn.Conv(self.planes, (3, 3), (self.strides,) * 2, padding=1,
                                   use_bias=False)(y)))
        y = norm()(nn.Conv(self.planes * 4, (1, 1), use_bias=False)(y))
        if self.downsample:
            x = norm()(nn.Conv(self.planes * 4, (1, 1), (self.strides,) * 2,
                               use_bias=False)(x))
        return nn.relu(x + y)


class ResNet50(nn.Module):
    """torchvision's resnet50 layout: 161 parameter arrays, 25.6 M parameters."""
    classes: int = 1000

    @nn.compact
    def __call__(self, x, train=True):
        x = nn.Conv(64, (7, 7), (2, 2), padding=3, use_bias=False)(x)
        x = nn.relu(nn.BatchNorm(use_running_average=not train, momentum=0.9)(x))
        x = nn.max_pool(x, (3, 3), (2, 2), padding=((1, 1), (1, 1)))
        for i, (planes, blocks) in enumerate(((64, 3), (128, 4), (256, 6), (512, 3))):
            for b in range(blocks):
                x = Bottleneck(planes, 2 if (b == 0 and i > 0) else 1, b == 0)(x, train)
        return nn.Dense(self.classes)(x.mean(axis=(1, 2)))


def resnet50_shapes():
    """torchvision.models.resnet50()'s parameter shapes (bench/tf_bench.py's list)."""
    shapes = [(64, 3, 7, 7), (64,), (64,)]
    inplanes = 64
    for planes, blocks in ((64, 3), (128, 4), (256, 6), (512, 3)):
        for block in range(blocks):
            shapes += [(planes, inplanes, 1, 1), (planes,), (planes,),
                       (planes, planes, 3, 3), (planes,), (planes,),
                       (planes * 4, planes, 1, 1), (planes * 4,), (planes * 4,)]
            if block == 0:
                shapes += [(planes * 4, inplanes, 1, 1), (planes * 4,), (planes * 4,)]
            inplanes = planes * 4
    return shapes + [(1000, 2048), (1000,)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--model", choices=["resnet50", "gradients"], default="resnet50")
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--num-warmup-batches", type=int, default=10,
                        help="batches that do not count towards the result")
    parser.add_argument("--num-batches-per-iter", type=int, default=10)
    parser.add_argument("--num-iters", type=int, default=10)
    parser.add_argument("--fp16-allreduce", action="store_true",
                        help="compress gradients to float16 for the allreduce")
    parser.add_argument("--no-allreduce", dest="allreduce", action="store_false",
                        help="plain optax SGD: the step without kolo, for comparison")
    args = parser.parse_args()

    kj.init()
    sgd = optax.sgd(0.01 * kj.size(), momentum=0.9)
    compression = kj.Compression.fp16 if args.fp16_allreduce else kj.Compression.none
    # Horovod: the wrapped optimizer averages the gradients over all ranks inside the step.
    tx = kj.DistributedOptimizer(sgd, compression=compression) if args.allreduce else sgd

    if args.model == "resnet50":
        model = ResNet50()
        rng = jax.random.PRNGKey(kj.rank())
        data = jax.random.uniform(rng, (args.batch_size, args.image_size, args.image_size, 3))
        target = jax.random.randint(rng, (args.batch_size,), 0, 1000)
        variables = model.init(jax.random.PRNGKey(kj.rank()), data[:1], train=False)
        # Horovod: every rank starts from rank 0's parameters and batch statistics.
        variables = kj.broadcast_parameters(variables, root_rank=0)
        params, stats = variables["params"], variables["batch_stats"]

        @jax.jit
        def step(params, stats, opt_state):
            def loss_fn(p):
                logits, new = model.apply({"params": p, "batch_stats": stats}, data,
                                          train=True, mutable=["batch_stats"])
                loss = optax.softmax_cross_entropy_with_integer_labels(logits, target).mean()
                return loss, new["batch_stats"]
            grads, stats = jax.grad(loss_fn, has_aux=True)(params)
            updates, opt_state = tx.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), stats, opt_state
        unit = "img"
    else:
        # No model compute: the step is the allreduce of ResNet-50-sized gradients and SGD.
        params = {"p%03d" % i: jnp.full(s, 0.01, jnp.float32)
                  for i, s in enumerate(resnet50_shapes())}
        stats = None

        @jax.jit
        def step(params, stats, opt_state):
            grads = jax.tree_util.tree_map(lambda p: p * 0.5 + 1.0, params)
            updates, opt_state = tx.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), stats, opt_state
        unit = "steps"
    opt_state = tx.init(params)
    state = [params, stats, opt_state]

    def run_steps(n):
        for _ in range(n):
            state[:] = step(*state)
        jax.block_until_ready(state)

    def log(text):
        if kj.is_chief():
            print(text, flush=True)

    n_params = sum(x.size for x in jax.tree_util.tree_leaves(params))
    log("Model: %s (%d parameter arrays, %.1f M parameters), %sranks: %d, allreduce: %s" % (
        args.model, len(jax.tree_util.tree_leaves(params)), n_params / 1e6,
        "batch size %d per rank at %d px, " % (args.batch_size, args.image_size)
        if unit == "img" else "", kj.size(),
        ("fp16" if args.fp16_allreduce else "float32") if args.allreduce else "off"))
    log("Running warmup...")
    run_steps(1 + args.num_warmup_batches)  # the first step compiles
    log("Running benchmark...")
    per_step = args.batch_size if unit == "img" else 1
    rates = []
    for i in range(args.num_iters):
        t = timeit.timeit(lambda: run_steps(args.num_batches_per_iter), number=1)
        rate = per_step * args.num_batches_per_iter / t
        log("Iter #%d: %.1f %s/sec per rank" % (i, rate, unit))
        rates.append(rate)
    mean, spread = np.mean(rates), 1.96 * np.std(rates)
    label = "Img" if unit == "img" else "Steps"
    log("%s/sec per rank: %.1f +-%.1f" % (label, mean, spread))
    log("Total %s/sec on %d rank(s): %.1f +-%.1f" % (label.lower(), kj.size(),
                                                    kj.size() * mean, kj.size() * spread))
    kj.shutdown()


if __name__ == "__main__":
    main()
