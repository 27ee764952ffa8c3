"""Data-parallel Lightning training on scikit-learn's bundled digits data set with kolo.

    kolorun -np 2 .venv/bin/python examples/lightning_digits.py
    kolorun -np 4 -H node1:2,node2:2 .venv/bin/python examples/lightning_digits.py

An ordinary LightningModule and Trainer(strategy="kolo"): kolorun starts the processes,
Lightning gives each its shard of the training set (a DistributedSampler), the strategy
averages the gradients while backward runs and broadcasts the initial weights from rank 0,
and only rank 0 logs and writes the checkpoint. The strategy leaves the learning rate alone:
this script scales it by the number of ranks itself. Prints the test accuracy at the end.
"""
import argparse
import os
import socket
import tempfile

import lightning.pytorch as pl
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.utils.data import DataLoader, TensorDataset

import kolo.lightning  # noqa: F401  (registers strategy="kolo")


class DigitsMLP(pl.LightningModule):
    def __init__(self, lr):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                       torch.nn.Linear(128, 10))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self(x), y)
        # sync_dist: the epoch's mean over every rank (kolo allreduce), logged by rank 0.
        self.log("train_loss", loss, on_step=False, on_epoch=True, sync_dist=True)
        return loss

    def predict_step(self, batch, batch_idx):
        x, y = batch
        return torch.stack([(self(x).argmax(dim=1) == y).sum(), torch.tensor(len(y))])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)


def loaders(batch_size):
    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target, dtype=torch.int64)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, random_state=0,
                                                        stratify=y)
    # No sampler here: Lightning adds a DistributedSampler from the strategy's ranks.
    train = DataLoader(TensorDataset(x_train, y_train), batch_size=batch_size, shuffle=True)
    test = DataLoader(TensorDataset(x_test, y_test), batch_size=256)
    return train, test


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.05, help="for one rank; scaled by size")
    parser.add_argument("--root-dir", default=os.path.join(tempfile.gettempdir(),
                                                           "kolo_lightning_digits"),
                        help="logs and checkpoints (rank 0 writes them)")
    args = parser.parse_args()
    torch.set_num_threads(1)

    trainer = pl.Trainer(strategy="kolo", accelerator="cpu", max_epochs=args.epochs,
                         default_root_dir=args.root_dir, logger=pl.loggers.CSVLogger(args.root_dir),
                         enable_progress_bar=False, enable_model_summary=False)
    print("rank %d of %d, local rank %d, node %d, host %s"
          % (trainer.global_rank, trainer.world_size, trainer.local_rank, trainer.node_rank,
             socket.gethostname()), flush=True)

    # Different on purpose: the strategy broadcasts rank 0's initial weights.
    torch.manual_seed(1234 + trainer.global_rank)
    model = DigitsMLP(lr=args.lr * trainer.world_size)
    train, test = loaders(args.batch_size)
    trainer.fit(model, train)
    train_loss = float(trainer.callback_metrics["train_loss"])

    # predict() gives every rank a share of the test set, each sample exactly once.
    counts = torch.stack(trainer.predict(model, test)).sum(dim=0)
    correct, total = trainer.strategy.reduce(counts, reduce_op="sum").tolist()
    if trainer.is_global_zero:
        print("train loss: %.4f" % train_loss)
        print("checkpoint: %s" % trainer.checkpoint_callback.best_model_path)
        print("test accuracy: %.4f (%d of %d)" % (correct / total, correct, total))


if __name__ == "__main__":
    main()
