"""A's compulsory L1 misses (`analytic._compulsory`): each tile's distinct sectors against an enumeration of
its addresses, and nchw A misses against simulation."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import analytic
import simcore
import traces
from analytic._compulsory import tile_sectors
from simcore import metrics as Mx
from traces import ConvLayer, KernelConfig


def _naive_sectors(tile, tm, n, c, h, w, r, s, stride, pad, dil, eb, nchw):
    """Distinct 32-byte sectors of every A element (n, c, h, w) the tile's output rows read (DESIGN section 3's
    addresses: nhwc ((n H + h) W + w) C + c, nchw ((n C + c) H + h) W + w)."""
    p = (h + 2 * pad - (r - 1) * dil - 1) // stride + 1
    q = (w + 2 * pad - (s - 1) * dil - 1) // stride + 1
    sectors = set()
    for m in range(tile * tm, min((tile + 1) * tm, n * p * q)):
        nn, pp, qq = m // (p * q), (m // q) % p, m % q
        for i in range(r):
            for j in range(s):
                y, x = pp * stride - pad + i * dil, qq * stride - pad + j * dil
                if 0 <= y < h and 0 <= x < w:
                    for cc in range(c):
                        index = ((nn * c + cc) * h + y) * w + x if nchw else ((nn * h + y) * w + x) * c + cc
                        sectors.add(index * eb // 32)
    return len(sectors)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 3), c=st.integers(1, 40), h=st.integers(1, 11), w=st.integers(1, 11), r=st.integers(1, 3),
       s=st.integers(1, 3), stride=st.integers(1, 3), pad=st.integers(0, 2), dil=st.integers(1, 2),
       tm=st.sampled_from([4, 16, 32]), eb=st.sampled_from([2, 4]), nchw=st.booleans())
def test_tile_sectors_count_every_address(n, c, h, w, r, s, stride, pad, dil, tm, eb, nchw):
    p = (h + 2 * pad - (r - 1) * dil - 1) // stride + 1
    q = (w + 2 * pad - (s - 1) * dil - 1) // stride + 1
    if p < 1 or q < 1:
        return
    tiles = -(-n * p * q // tm)
    picks = np.arange(tiles, dtype=np.int64)
    got = tile_sectors(picks, tm, n * p * q, p, q, c, h, w, r, s, stride, stride, pad, pad, dil, dil, eb, 32, nchw)
    want = [_naive_sectors(t, tm, n, c, h, w, r, s, stride, pad, dil, eb, nchw) for t in range(tiles)]
    assert got.tolist() == want


def test_nchw_a_misses_are_at_least_each_ctas_sectors():
    """Seed 1 #22's shape, fewer images: 32-row tiles on 102-wide images, a 3x3 filter's rows shift their
    runs across sector boundaries; the simulated A misses are each CTA's distinct sectors at every L1 size
    (a fifth more than the first touches counted one filter position at a time)."""
    layer = ConvLayer(1, 24, 102, 102, 32, 3, 3, pad=1, name="nchw3x3")
    kernel = KernelConfig(tile_m=32, tile_n=32, tile_k=16, threads=128, layout="nchw")
    for scale in (1.5, 4.0):
        gpu = simcore.scale_gpu(simcore.gpu("h100"), {"l1_smem_bytes": scale})
        sim = traces.simulate_layer(layer, gpu, kernel)[Mx.L1_LD_MISSES + ":A"]
        pred = analytic.predict_layer(layer, gpu, kernel)[Mx.L1_LD_MISSES + ":A"]
        assert abs(pred / sim - 1.0) < 0.03, (scale, pred, sim)


def test_nchw_lifetime_lines_keep_the_previous_waves_filters_out():
    """Seed 5 #23's shape, fewer images and filters: 1x1 nchw fp16 on 32-row tiles, 192 planes. A CTA's
    lifetime reads 240 A lines (a plane's 64-byte run takes a whole line), not the 96 of densely packed
    rows, so the previous wave's filter lines are evicted before this CTA reads them again: the filter's
    L1 hits are its sector pairs alone (every other k-step), 50 %, where 81-91 % was predicted."""
    layer = ConvLayer(4, 192, 44, 44, 256, 1, 1, name="nchw1x1")
    kernel = KernelConfig(tile_m=32, tile_n=64, tile_k=8, threads=256, layout="nchw", dtype="fp16",
                          swizzle_log=1)
    gpu = simcore.scale_gpu(simcore.gpu("titanxp"), {"l2_bytes": 0.25, "sms": 1.5, "l1_smem_bytes": 1.5})
    sim = traces.simulate_layer(layer, gpu, kernel)
    pred = analytic.predict_layer(layer, gpu, kernel)
    hits, sectors = Mx.L1_LD_HITS + ":B", Mx.L1_LD_SECTORS + ":B"
    assert abs(pred[hits] - sim[hits]) / sim[sectors] < 0.03
