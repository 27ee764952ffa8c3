"""``kolo.lightning``: a Lightning strategy on kolo's collectives.

    import lightning.pytorch as pl
    import kolo.lightning  # registers strategy="kolo"

    trainer = pl.Trainer(strategy="kolo", accelerator="cpu")

and run the script under kolorun (``kolorun -np 4 python train.py``): kolorun
starts one process per device, ``KoloStrategy`` takes the ranks and the world
size from kolo, averages the gradients with ``kolo.torch.DistributedOptimizer``
while backward runs, broadcasts the initial weights and optimizer state from
rank 0, and runs Lightning's ``reduce`` / ``all_gather`` / ``broadcast`` /
``barrier`` on kolo. docs/api-lightning.md has the details.

Importing this module registers ``"kolo"`` with ``lightning.pytorch``, and with
``pytorch_lightning`` as well when that package is already imported (or is the
only one installed); ``import kolo.lightning.pytorch_lightning`` registers it
there in any order. ``pytorch_lightning`` is not imported otherwise: it cannot
share a process with TensorFlow.
"""
import importlib.util
import sys

try:
    from lightning.fabric.plugins.environments import ClusterEnvironment as _ClusterEnvironment
    from lightning.fabric.utilities.exceptions import MisconfigurationException
    from lightning.pytorch.strategies import ParallelStrategy as _ParallelStrategy
    from lightning.pytorch.strategies import StrategyRegistry as _StrategyRegistry
except ImportError:  # only pytorch_lightning is installed
    if importlib.util.find_spec("pytorch_lightning") is None:
        raise ImportError("kolo.lightning needs Lightning: pip install lightning (or "
                          "pytorch-lightning)") from None
    from kolo.lightning.pytorch_lightning import KoloEnvironment, KoloStrategy  # noqa: F401
else:
    from kolo.lightning.strategy import declare as _declare

    KoloEnvironment, KoloStrategy = _declare(__name__, _ClusterEnvironment, _ParallelStrategy,
                                             _StrategyRegistry, MisconfigurationException)

    if "pytorch_lightning" in sys.modules:
        import kolo.lightning.pytorch_lightning  # noqa: F401

from kolo.lightning.metrics import torchmetrics_kwargs  # noqa: E402

__all__ = ["KoloStrategy", "KoloEnvironment", "torchmetrics_kwargs"]
