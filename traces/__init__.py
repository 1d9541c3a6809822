"""traces: the workload (layers, networks, kernel) and the exact implicit-GEMM address stream."""
from .kernel import KernelConfig, ThreadMap
from .layer import ConvLayer

__all__ = ["ConvLayer", "KernelConfig", "ThreadMap"]
