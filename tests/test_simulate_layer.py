"""simulate_layer: the generated stream through the Hierarchy equals the naive stream through it."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from simcore import metrics as M
from simcore.gpus import gpu
from tests.naive_stream import naive_stream
from traces import ConvLayer, KernelConfig, simulate_layer

hierarchy = pytest.importorskip("simcore.hierarchy")

CASES = [
    (ConvLayer(2, 8, 9, 7, 40, 3, 3, stride=(2, 1), pad=1), KernelConfig(tile_m=32, tile_n=32, tile_k=8,
                                                                         threads=64, ctas_per_sm=2)),
    (ConvLayer(2, 6, 9, 7, 20, 3, 3, pad=1, dilation=(2, 1)),
     KernelConfig(tile_m=32, tile_n=32, tile_k=8, threads=64, layout="nchw", swizzle_log=1)),
    (ConvLayer(1, 8, 10, 10, 24, 3, 3, pad=1),
     KernelConfig(tile_m=64, tile_n=32, tile_k=16, threads=64, dtype="fp16", vector=4, ctas_per_sm=3)),
    (ConvLayer(1, 3, 16, 16, 16, 3, 3, pad=1), KernelConfig()),
    # dgrad (strided: idle and store-only CTAs) and wgrad (loads past GEMM-N)
    (ConvLayer(2, 8, 9, 7, 40, 3, 3, stride=2, pad=1), KernelConfig(tile_m=32, tile_n=32, tile_k=8, threads=64,
                                                                    ctas_per_sm=2, op="dgrad")),
    (ConvLayer(2, 8, 2, 7, 12, 2, 2, stride=3), KernelConfig(tile_m=32, tile_n=32, tile_k=8, threads=64,
                                                             op="dgrad")),
    (ConvLayer(1, 3, 16, 16, 16, 3, 3, pad=1), KernelConfig(op="wgrad")),
    (ConvLayer(2, 6, 9, 7, 20, 3, 3, pad=1, dilation=(2, 1)),
     KernelConfig(tile_m=32, tile_n=64, tile_k=8, threads=64, dtype="fp16", vector=2, op="wgrad")),
]


def small_gpu(sms, **kw):
    # a small L2 so that capacity misses and dirty evictions happen on small layers
    return dataclasses.replace(gpu("v100"), sms=sms, l2_bytes=64 * 24 * 128 // 8, l2_slices=8, **kw)


def naive_metrics(layer, g, kernel):
    reqs = naive_stream(layer, g, kernel)
    h = hierarchy.Hierarchy.for_gpu(g, kernel.l1_config(g))
    n = len(reqs)
    first = np.zeros(n, np.int64)
    count = np.zeros(n, np.int32)
    secs = []
    for i, req in enumerate(reqs):
        first[i] = len(secs)
        count[i] = len(req[6])
        secs.extend(req[6])
    h.feed(np.array([r[1] for r in reqs], np.int32), np.array([r[3] for r in reqs], np.uint8),
           np.array([r[4] for r in reqs], np.uint8), first, count, np.array(secs, np.int64))
    return reqs, h.metrics()


@pytest.mark.parametrize("case", range(len(CASES)))
def test_simulate_layer_equals_naive_stream(case):
    layer, kernel = CASES[case]
    g = small_gpu(3)
    reqs, expected = naive_metrics(layer, g, kernel)
    got = simulate_layer(layer, g, kernel)
    assert got == expected
    # chunking and threads do not change the counts
    assert simulate_layer(layer, g, kernel, jobs=1, max_sectors=1) == expected
    assert simulate_layer(layer, g, kernel, jobs=2, max_sectors=500) == expected
    # L1 request and sector counts equal the naive generator's
    for o, op in enumerate(M.OPERANDS):
        loads = [r for r in reqs if r[3] == o and not r[4]]
        stores = [r for r in reqs if r[3] == o and r[4]]
        assert got[M.operand_key(M.L1_LD_REQUESTS, op)] == len(loads)
        assert got[M.operand_key(M.L1_LD_SECTORS, op)] == sum(len(r[6]) for r in loads)
        assert got[M.operand_key(M.L1_ST_SECTORS, op)] == sum(len(r[6]) for r in stores)
    check_conservation(got)


def check_conservation(m):
    for sfx in ("",) + tuple(":" + op for op in M.OPERANDS):
        k = lambda key: m[key + sfx]  # noqa: E731
        assert k(M.L1_LD_HITS) + k(M.L1_LD_MISSES) == k(M.L1_LD_SECTORS)
        assert k(M.L2_RD_SECTORS) == k(M.L1_LD_MISSES)
        assert k(M.L2_WR_SECTORS) == k(M.L1_ST_SECTORS)
        assert k(M.L2_RD_HITS) + k(M.L2_RD_MISSES) == k(M.L2_RD_SECTORS)
        assert k(M.L2_WR_HITS) + k(M.L2_WR_MISSES) == k(M.L2_WR_SECTORS)
        assert k(M.DRAM_RD_SECTORS) == k(M.L2_RD_MISSES)
        assert k(M.DRAM_WR_SECTORS) + k(M.L2_DIRTY_AT_END) <= k(M.L2_WR_SECTORS)
    for key in M.METRICS:
        assert m[key] == sum(m[M.operand_key(key, op)] for op in M.OPERANDS)
    # only the output is stored, only the inputs are loaded
    assert m[M.L1_ST_SECTORS] == m[M.L1_ST_SECTORS + ":C"]
    assert m[M.L1_LD_SECTORS + ":C"] == 0


@pytest.mark.parametrize("op", ["fprop", "dgrad", "wgrad"])
def test_every_output_sector_written_once(op):
    """With an L2 large enough to hold the output, every output sector is written and ends dirty
    or is written back: DRAM writes + dirty at end = distinct output sectors (y, dx or dw)."""
    layer = ConvLayer(1, 8, 12, 12, 32, 3, 3, pad=1, stride=2 if op == "dgrad" else 1)
    kernel = KernelConfig(tile_m=64, tile_n=32, tile_k=8, threads=64, op=op)
    g = dataclasses.replace(gpu("v100"), sms=4)
    m = simulate_layer(layer, g, kernel)
    elements = {"fprop": layer.output_elements, "dgrad": layer.input_elements, "wgrad": layer.params}[op]
    out_sectors = elements * kernel.elem_bytes // 32
    assert m[M.DRAM_WR_SECTORS] + m[M.L2_DIRTY_AT_END] == out_sectors
    assert m[M.L1_ST_SECTORS] == out_sectors


def test_simulate_layer_bad_input():
    layer = ConvLayer(1, 6, 8, 8, 8, 3, 3)
    with pytest.raises(TypeError, match="layer"):
        simulate_layer("conv", gpu("v100"), KernelConfig())
    with pytest.raises(ValueError, match="vector"):
        simulate_layer(layer, gpu("v100"), KernelConfig(vector=4))
    with pytest.raises(ValueError, match="jobs"):
        simulate_layer(layer, gpu("v100"), KernelConfig(), jobs=0)
