"""kolo: collective operations for data-parallel training.

Use the framework module: ``import kolo.torch as kolo``.
"""
__version__ = "0.1.0"
