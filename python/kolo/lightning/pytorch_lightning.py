"""``KoloStrategy`` for the ``pytorch_lightning`` package (``import pytorch_lightning as pl``):
importing this module registers ``strategy="kolo"`` with it. ``kolo.lightning`` does so
itself when ``pytorch_lightning`` is imported first."""
from lightning_fabric.plugins.environments import ClusterEnvironment as _ClusterEnvironment
from lightning_fabric.utilities.exceptions import MisconfigurationException
from pytorch_lightning.strategies import ParallelStrategy as _ParallelStrategy
from pytorch_lightning.strategies import StrategyRegistry as _StrategyRegistry

from kolo.lightning.strategy import declare

KoloEnvironment, KoloStrategy = declare(__name__, _ClusterEnvironment, _ParallelStrategy,
                                        _StrategyRegistry, MisconfigurationException)

__all__ = ["KoloStrategy", "KoloEnvironment"]
