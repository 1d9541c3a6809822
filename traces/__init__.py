"""traces: the workload (layers, networks, kernel) and the exact implicit-GEMM address stream."""
from .kernel import KernelConfig, ThreadMap
from .layer import ConvLayer
from .presets import KERNELS, kernel_from_options, kernel_preset

__all__ = ["ConvLayer", "KernelConfig", "KERNELS", "ThreadMap", "kernel_from_options", "kernel_preset"]

from .networks import NETWORKS, load_layers, network  # noqa: E402
from .onnx_import import load_onnx  # noqa: E402
from .resolve import resolve_layers  # noqa: E402

__all__ += ["NETWORKS", "load_layers", "load_onnx", "network", "resolve_layers"]

from .simulate import simulate_layer  # noqa: E402
from .stream import RequestChunk, iter_request_chunks, tensor_bases  # noqa: E402

__all__ += ["RequestChunk", "iter_request_chunks", "simulate_layer", "tensor_bases"]

from .tracefile import TraceFile, read_trace, replay, write_trace  # noqa: E402

__all__ += ["TraceFile", "read_trace", "replay", "write_trace"]
