"""SyncBatchNorm: batch statistics over the whole global batch, not one rank's shard.

The global sums of x and x^2 and the sample count are reduced with kolo's
differentiable allreduce, so autograd gives the exact gradient of normalizing
by global statistics (its backward is itself an allreduce).
"""
import torch

from kolo.torch import mpi_ops as _ops


class SyncBatchNorm(torch.nn.modules.batchnorm._BatchNorm):
    """Drop-in for ``torch.nn.BatchNorm{1,2,3}d`` in data-parallel training."""

    def _check_input_dim(self, x):
        if x.dim() < 2:
            raise ValueError("SyncBatchNorm expects at least 2-D input (N, C, ...), got %d-D"
                             % x.dim())

    def forward(self, x):
        self._check_input_dim(x)
        if not self.training and self.track_running_stats:
            return super().forward(x)
        dims = [0] + list(range(2, x.dim()))
        count = torch.tensor([x.numel() / x.shape[1]], dtype=x.dtype)
        stats = torch.cat([x.sum(dims), (x * x).sum(dims), count])
        total = _ops.allreduce(stats, op=_ops.Sum, name=None)
        c = x.shape[1]
        n = total[2 * c]
        mean = total[:c] / n
        var = total[c:2 * c] / n - mean * mean
        if self.training and self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked += 1
                momentum = self.momentum if self.momentum is not None else \
                    1.0 / float(self.num_batches_tracked)
                unbiased = var * n / max(n - 1, 1)
                self.running_mean.mul_(1 - momentum).add_(momentum * mean)
                self.running_var.mul_(1 - momentum).add_(momentum * unbiased)
        shape = [1, c] + [1] * (x.dim() - 2)
        y = (x - mean.view(shape)) / torch.sqrt(var.view(shape) + self.eps)
        if self.affine:
            y = y * self.weight.view(shape) + self.bias.view(shape)
        return y
