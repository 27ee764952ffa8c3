"""Data-parallel training on scikit-learn's bundled digits data set with kolo.

    kolorun -np 2 /usr/bin/python3 examples/pytorch_digits.py

Every rank trains on its own shard of the training set; kolo averages the
gradients. The learning rate is scaled by the number of ranks, initial weights
and optimizer state come from rank 0, and only rank 0 logs and writes the
checkpoint. Prints the test accuracy at the end.
"""
import argparse
import os

import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import kolo.torch as kolo


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.05, help="for one rank; scaled by size")
    parser.add_argument("--checkpoint", default="digits_checkpoint.pt")
    args = parser.parse_args()

    kolo.init()
    torch.set_num_threads(1)
    torch.manual_seed(1234 + kolo.rank())  # different on purpose: broadcast makes them equal

    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target, dtype=torch.int64)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, random_state=0,
                                                        stratify=y)
    # Each rank takes every size-th sample of the training set.
    x_shard, y_shard = x_train[kolo.rank()::kolo.size()], y_train[kolo.rank()::kolo.size()]

    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * kolo.size(), momentum=0.9)
    optimizer = kolo.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    kolo.broadcast_parameters(model.state_dict(), root_rank=0)
    kolo.broadcast_optimizer_state(optimizer, root_rank=0)

    # The same number of steps on every rank (shards may differ by one sample).
    steps = min(kolo.allgather_object(len(x_shard))) // args.batch_size
    for epoch in range(args.epochs):
        g = torch.Generator().manual_seed(epoch * 1000 + kolo.rank())
        order = torch.randperm(len(x_shard), generator=g)
        total = torch.zeros(1)
        for step in range(steps):
            idx = order[step * args.batch_size:(step + 1) * args.batch_size]
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x_shard[idx]), y_shard[idx])
            loss.backward()
            optimizer.step()
            total += loss.detach()
        mean_loss = kolo.allreduce(total / steps, name="epoch_loss")
        if kolo.rank() == 0 and (epoch % 10 == 0 or epoch == args.epochs - 1):
            print("epoch %2d  loss %.4f" % (epoch, mean_loss.item()), flush=True)

    with torch.no_grad():
        accuracy = (model(x_test).argmax(1) == y_test).float().mean().item()
    if kolo.rank() == 0:
        torch.save(model.state_dict(), args.checkpoint)
        print("ranks: %d  test accuracy: %.4f  checkpoint: %s" % (
            kolo.size(), accuracy, os.path.abspath(args.checkpoint)), flush=True)
    kolo.shutdown()


if __name__ == "__main__":
    main()
