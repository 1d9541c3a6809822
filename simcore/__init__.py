"""simcore: the simulated machine (cache geometry, sectored LRU caches, per-SM L1 + sliced L2, GPUs)."""
from .cache import simulate_trace
from .config import CacheConfig, CacheStats
from .gpus import GPU, GPUS, gpu
from .hierarchy import Hierarchy

__all__ = ["CacheConfig", "CacheStats", "GPU", "GPUS", "Hierarchy", "gpu", "metrics", "simulate_trace"]
from . import metrics  # noqa: E402
