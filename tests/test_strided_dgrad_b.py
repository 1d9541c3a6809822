"""Strided dgrad: the share of a sub-problem's filter sectors that a co-resident sub-problem of its class
reads near the same k-step (`analytic._geometry.dgrad_step_overlap`), against a slow reference and
the simulated L1."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import analytic
import simcore
import traces
from analytic._geometry import dgrad_b_classes, dgrad_step_overlap, strided_starts
from simcore.hypothetical import scale_gpu

SEC = 32


def slow_overlap(layer, kernel, depth):
    """Sets of sectors per k-step (first two filter blocks; taps s fastest), then per pair of one class
    the sectors of f's step t that g reads at a step within ``depth`` of t, over f's sectors."""
    R, S, C, K = layer.r, layer.s, layer.c, layer.k
    sh, sw = layer.stride
    eb, tk = kernel.elem_bytes, kernel.tile_k
    width = min(C, kernel.tile_n) * eb
    steps = []
    for start_r, start_s, _h, _w, nr, ns in strided_starts(layer):
        if not nr or not ns:
            continue
        seq = []
        for blk in range(min(2, -(-K // tk))):
            for r in range(start_r, R, sh):
                for s in range(start_s, S, sw):
                    found = set()
                    for k in range(blk * tk, min(K, blk * tk + tk)):
                        start = ((k * R + r) * S + s) * C * eb
                        found.update(range(start // SEC, (start + width - 1) // SEC + 1))
                    seq.append(found)
        steps.append(seq)
    cls = dgrad_b_classes(layer, kernel, SEC)
    out = np.zeros((len(steps), len(steps)))
    for f, seq_f in enumerate(steps):
        total = sum(len(x) for x in seq_f)
        for g, seq_g in enumerate(steps):
            if cls[f] != cls[g]:
                continue
            common = 0
            for t, x in enumerate(seq_f):
                near = set()
                for u in range(max(0, t - depth), min(len(seq_g), t + depth + 1)):
                    near |= seq_g[u]
                common += len(x & near)
            out[f, g] = common / total
    return out


def _layer(c, r, stride, k=32):
    return traces.ConvLayer(n=1, c=c, h=40, w=41, k=k, r=r, s=r, stride=(stride, stride), pad=(r // 2, r // 2),
                            name="sd")


def test_two_taps_a_sector_in_step_by_hand():
    # C = 8 fp16: 16-byte taps, two a sector (filter k's taps start (k·121 + r·11 + s)·16 bytes on);
    # 11x11 stride 3, pad 5 on a 40x41 image: the first row of starts is start_s = 1, 2, 0 (4, 4 and
    # 3 taps along s). Starts 1 and 2 run in step, and taps s and s + 1 share a sector where
    # k·121 + r·11 + s is even: half of them
    layer = _layer(8, 11, 3, k=64)
    kernel = traces.KernelConfig(tile_m=128, tile_n=32, tile_k=16, threads=64, dtype="fp16", op="dgrad")
    assert [start[1] for start in strided_starts(layer)[:3]] == [0, 1, 2]
    assert [start[5] for start in strided_starts(layer)[:3]] == [4, 4, 3]
    got = dgrad_step_overlap(layer, kernel, SEC, 0)
    assert got[0, 1] == pytest.approx(0.5) and got[1, 0] == pytest.approx(0.5)
    assert got[0, 0] == 1.0
    # start s = 2 reads 3 taps a row: out of step with the others after the first row of taps
    assert got[2, 1] < 0.2
    # a sector that stays long enough is found out of step too
    assert dgrad_step_overlap(layer, kernel, SEC, 8)[2, 1] > got[2, 1]


@given(st.sampled_from([3, 5, 6, 7, 8]), st.sampled_from([3, 5, 7]), st.sampled_from([2, 3]),
       st.sampled_from(["fp16", "fp32"]), st.sampled_from([8, 16]), st.sampled_from([0, 1, 3, 8]))
@settings(max_examples=25, deadline=None)
def test_step_overlap_against_the_slow_reference(c, r, stride, dtype, tk, depth):
    layer = _layer(c, r, stride)
    kernel = traces.KernelConfig(tile_m=64, tile_n=32, tile_k=tk, threads=64, dtype=dtype, op="dgrad")
    assert np.allclose(dgrad_step_overlap(layer, kernel, SEC, depth), slow_overlap(layer, kernel, depth))


def test_b_hits_of_sub_problems_out_of_step_against_the_simulation():
    # the 11x11 stride-3 layer with 16-byte taps on a quarter of a TITAN Xp: the A windows fill the
    # L1, so a filter sector is found only when a co-resident sub-problem read it at the same k-step
    # (about half of it for s = 0 and 1); the class alone counted every BREP slot's reads as hits
    gpu = scale_gpu(simcore.gpu("titanxp"), {"sms": 0.25})
    layer = traces.ConvLayer(n=1, c=8, h=64, w=64, k=64, r=11, s=11, stride=(3, 3), pad=(5, 5), name="sd")
    kernel = traces.KernelConfig(tile_m=128, tile_n=32, tile_k=16, threads=64, dtype="fp16", op="dgrad")
    sim = traces.simulate_layer(layer, gpu, kernel, jobs=1)
    pred = analytic.predict_layer(layer, gpu, kernel)
    key = "l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum:B"
    total = sim["l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum:B"]
    assert abs(pred[key] - sim[key]) / total < 0.1
