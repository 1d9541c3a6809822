"""simcore: the simulated machine (cache geometry, sectored LRU caches, per-SM L1 + sliced L2, GPUs)."""
from .cache import simulate_trace
from .config import CacheConfig, CacheStats
from .gpus import GPU, GPUS, gpu
from .hierarchy import Hierarchy
from .hypothetical import describe_l2, replace_gpu, scale_gpu

__all__ = ["CacheConfig", "CacheStats", "GPU", "GPUS", "Hierarchy", "describe_l2", "gpu", "metrics", "replace_gpu",
           "scale_gpu", "simulate_trace"]
from . import metrics  # noqa: E402
