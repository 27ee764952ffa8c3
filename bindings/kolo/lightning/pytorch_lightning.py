"""``KoloStrategy`` for the ``pytorch_lightning`` package (``import pytorch_lightning as pl``):
importing this module registers ``strategy="kolo"`` with it. ``kolo.lightning`` does so
itself when ``pytorch_lightning`` is imported first."""
from lightning_fabric.plugins.environments import ClusterEnvironment as _ClusterEnvironment
from lightning_fabric.utilities.exceptions import MisconfigurationException
from pytorch_lightning.strategies import ParallelStrategy as _ParallelStrategy
from pytorch_lightning.strategies import StrategyRegistry as _StrategyRegistry

from kolo.lightning.strategy import EnvironmentMixin as _EnvironmentMixin
from kolo.lightning.strategy import StrategyMixin as _StrategyMixin


class KoloEnvironment(_EnvironmentMixin, _ClusterEnvironment):
    """Ranks and world size as kolorun started them (pytorch_lightning)."""


class KoloStrategy(_StrategyMixin, _ParallelStrategy):
    __doc__ = _StrategyMixin.__doc__
    _environment_class = KoloEnvironment
    _misconfiguration_class = MisconfigurationException


KoloStrategy.register_strategies(_StrategyRegistry)

__all__ = ["KoloStrategy", "KoloEnvironment"]
