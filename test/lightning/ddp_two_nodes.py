"""A stock Lightning DDP script: strategy="ddp", num_nodes=2, devices=2 on the CPU, no kolo
import. Under kolorun on two hosts every process must get its own global rank (from
NODE_RANK and LOCAL_RANK, which kolo-rank sets) instead of two processes per rank; it prints
what Lightning made of it, then trains a few DDP steps."""
import socket

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, TensorDataset


class Regression(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main():
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 8, generator=g)
    data = TensorDataset(x, x.sum(dim=1, keepdim=True))
    trainer = pl.Trainer(strategy="ddp", num_nodes=2, devices=2, accelerator="cpu",
                         max_epochs=2, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    model = Regression()
    trainer.fit(model, DataLoader(data, batch_size=4, shuffle=True))
    print("DDP global_rank=%d local_rank=%d node_rank=%d world_size=%d host=%s env=%s steps=%d "
          "weight_sum=%.6f done"
          % (trainer.global_rank, trainer.local_rank, trainer.node_rank, trainer.world_size,
             socket.gethostname(), type(trainer.strategy.cluster_environment).__name__,
             trainer.global_step, float(sum(p.detach().sum() for p in model.parameters()))),
          flush=True)


if __name__ == "__main__":
    main()
