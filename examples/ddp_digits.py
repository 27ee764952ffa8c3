"""Plain PyTorch DistributedDataParallel on scikit-learn's bundled digits data set, with
kolo as the torch.distributed backend (no downloads).

    kolorun -np 2 python examples/ddp_digits.py
    torchrun --standalone --nproc_per_node 2 examples/ddp_digits.py   (the same accuracy)

The only kolo-specific lines are the import that registers the backend and
backend="kolo"; kolorun and torchrun give every rank RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT, so init_process_group() needs nothing else (under torchrun kolo joins the
ranks through torch.distributed's store). A DistributedSampler gives every rank its
share of the training set. Rank 0 prints the test accuracy at the end.
"""
import argparse

import torch
import torch.distributed as dist
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import kolo.torch.c10d  # noqa: F401  (registers the torch.distributed backend "kolo")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.01, help="for one rank; scaled by size")
    args = parser.parse_args()

    dist.init_process_group(backend="kolo")
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    torch.manual_seed(1234)

    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target, dtype=torch.int64)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, random_state=0,
                                                        stratify=y)
    train = TensorDataset(x_train, y_train)
    sampler = DistributedSampler(train, shuffle=True, seed=0)
    loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler)

    model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                    torch.nn.Linear(128, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * size, momentum=0.9)

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        total, batches = torch.zeros(1), 0
        for xb, yb in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(xb), yb)
            loss.backward()
            optimizer.step()
            total += loss.detach()
            batches += 1
        dist.all_reduce(total, op=dist.ReduceOp.AVG)
        if rank == 0 and (epoch % 20 == 0 or epoch == args.epochs - 1):
            print("epoch %2d  loss %.4f" % (epoch, total.item() / batches), flush=True)

    with torch.no_grad():
        accuracy = (model(x_test).argmax(1) == y_test).float().mean().item()
    if rank == 0:
        print("ranks: %d  test accuracy: %.4f" % (size, accuracy), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
