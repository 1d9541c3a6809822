"""simcore: the simulated machine (cache geometry, sectored LRU caches, per-SM L1 + sliced L2, GPUs)."""
from .config import CacheConfig, CacheStats
from .gpus import GPU, GPUS, gpu

__all__ = ["CacheConfig", "CacheStats", "GPU", "GPUS", "gpu", "metrics"]
from . import metrics  # noqa: E402
