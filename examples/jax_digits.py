"""Data-parallel JAX training (Flax + Optax) on scikit-learn's bundled digits data set with kolo.

    JAX_PLATFORMS=cpu kolorun -np 2 .venv/bin/python examples/jax_digits.py

Horovod's pattern with `import kolo.jax as kj`: every rank trains on its own shard of the
training set, kj.DistributedOptimizer averages the gradients inside the jitted train step,
the learning rate is scaled by the number of ranks, the initial parameters come from rank 0
(kj.broadcast_parameters), and only rank 0 (kj.is_chief()) logs and writes the checkpoint.
Each rank's own output can be kept in a file of its own with
`kolorun --output-filename DIR` (DIR/rank.N/stdout and stderr). Prints the test accuracy
at the end.
"""
import argparse
import os
import pickle
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
import flax.linen as nn  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

import kolo.jax as kj  # noqa: E402


class MLP(nn.Module):
    hidden: int = 128

    @nn.compact
    def __call__(self, x):
        return nn.Dense(10)(nn.relu(nn.Dense(self.hidden)(x)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.05, help="for one rank; scaled by size")
    parser.add_argument("--checkpoint", help="rank 0 saves the parameters here (a pickle; "
                        "default: in a temporary directory)")
    args = parser.parse_args()

    kj.init()

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int32)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, random_state=0,
                                                        stratify=y)
    # Each rank takes every size-th sample of the training set.
    x_shard, y_shard = x_train[kj.rank()::kj.size()], y_train[kj.rank()::kj.size()]

    model = MLP()
    # Different on purpose: the broadcast from rank 0 makes the initial parameters equal.
    params = model.init(jax.random.PRNGKey(1234 + kj.rank()), jnp.zeros((1, 64)))
    params = kj.broadcast_parameters(params, root_rank=0)

    # Scale the learning rate by the number of ranks; the wrapped optimizer averages the
    # gradients over all ranks (one fused allreduce per step) before SGD applies them.
    tx = kj.DistributedOptimizer(optax.sgd(args.lr * kj.size(), momentum=0.9))
    opt_state = tx.init(params)  # the same on every rank: it is built from equal params

    @jax.jit
    def train_step(params, opt_state, xb, yb):
        def loss_fn(p):
            logits = model.apply(p, xb)
            return optax.softmax_cross_entropy_with_integer_labels(logits, yb).mean()
        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    # The same number of steps on every rank (shards may differ by one sample).
    steps = min(kj.allgather_object(len(x_shard))) // args.batch_size
    rng = np.random.default_rng(kj.rank())
    for epoch in range(args.epochs):
        order = rng.permutation(len(x_shard))
        total = 0.0
        for step in range(steps):
            idx = order[step * args.batch_size:(step + 1) * args.batch_size]
            params, opt_state, loss = train_step(params, opt_state, x_shard[idx], y_shard[idx])
            total += loss
        mean_loss = kj.allreduce(total / steps, name="epoch_loss")
        if kj.is_chief() and (epoch % 10 == 0 or epoch == args.epochs - 1):
            print("epoch %2d  loss %.4f" % (epoch, float(mean_loss)), flush=True)

    # Every rank holds the same parameters; rank 0 reports and writes the checkpoint.
    accuracy = float((model.apply(params, x_test).argmax(1) == y_test).mean())
    if kj.is_chief():
        checkpoint = args.checkpoint or os.path.join(tempfile.mkdtemp(prefix="kolo_digits_"),
                                                     "digits_params.pkl")
        with open(checkpoint, "wb") as f:
            pickle.dump(jax.device_get(params), f)
        print("ranks: %d  test accuracy: %.4f  checkpoint: %s" % (
            kj.size(), accuracy, os.path.abspath(checkpoint)), flush=True)
    kj.shutdown()


if __name__ == "__main__":
    main()
