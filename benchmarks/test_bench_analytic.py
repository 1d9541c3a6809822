"""pytest-benchmark: analytic predictions of every resnet50 conv layer (run with --benchmark-enable)."""
import simcore
import traces
from analytic import predict_network, set_model_kernels


def test_bench_predict_network_resnet50(benchmark):
    layers = traces.network("resnet50", 32)
    gpu = simcore.gpu("v100")
    kernel = traces.KernelConfig()
    set_model_kernels("compiled")              # the compiled tier's rate (analytic._tiers)
    predict_network(layers, gpu, kernel)       # JIT warm-up
    preds = benchmark(predict_network, layers, gpu, kernel)
    assert len(preds) == len(layers)
