"""dgrad's dy and w lines share an L1 set only where their phases agree (`_set_phase.dgrad_phase_share`):
against the sets of every dy row and filter row of a k-step enumerated from their byte addresses; and B's
L2 reads of small dgrad layers whose dy rows crowd one set, simulated."""
import dataclasses
import math

import pytest
from hypothesis import given, settings, strategies as st

import analytic
import simcore
import traces
from analytic._set_phase import dgrad_phase_share
from traces.stream import tensor_bases

LINE, SETS = 128, 4


def naive_phase_share(layer, kernel):
    """Share of (k-step block k0, CTA column c0) pairs where a set holds one of the k-step's dy lines (rows
    (n, p, q), channels k0 .. k0 + T_k) and one of the column's filter lines (filters k0 .., taps, columns
    c0 .. c0 + T_n), all from byte addresses."""
    eb = kernel.elem_bytes
    _x, w_base, y_base = tensor_bases(layer, kernel)
    pixels = layer.n * layer.p * layer.q
    agree = total = 0
    for k0 in range(0, layer.k, kernel.tile_k):
        ks = range(k0, min(layer.k, k0 + kernel.tile_k))
        dy_sets = {((y_base + (m * layer.k + kk) * eb) // LINE) % SETS for m in range(pixels) for kk in ks}
        for c0 in range(0, layer.c, kernel.tile_n):
            cs = range(c0, min(layer.c, c0 + kernel.tile_n))
            w_sets = {((w_base + (((kk * layer.r + r) * layer.s + s) * layer.c + c) * eb) // LINE) % SETS
                      for kk in ks for r in range(layer.r) for s in range(layer.s) for c in cs}
            total += 1
            agree += bool(dy_sets & w_sets)
    return agree / total


@given(st.sampled_from([32, 64, 128, 256]), st.sampled_from([32, 64, 128]), st.sampled_from([1, 3]),
       st.sampled_from([8, 16, 32]), st.sampled_from([16, 32, 64]), st.sampled_from(["fp32", "fp16"]))
@settings(max_examples=40, deadline=None)
def test_phase_share_is_the_enumerated_sets(k, c, r, tk, tn, dtype):
    layer = traces.ConvLayer(name="d", n=1, c=c, h=5, w=5, k=k, r=r, s=r, pad=r // 2)
    kernel = traces.KernelConfig(tile_m=32, tile_n=tn, tile_k=tk, threads=64, dtype=dtype, op="dgrad")
    eb = kernel.elem_bytes
    unit, row_b = k * eb, r * r * c * eb
    if unit % LINE or row_b % LINE or tk * eb > LINE:
        return
    nsa = SETS // math.gcd(unit // LINE, SETS)          # the sets a pitch of whole lines reaches
    nsb = SETS // math.gcd(row_b // LINE, SETS)
    if nsa >= SETS or nsb >= SETS:
        return
    assert dgrad_phase_share(layer, kernel, unit, row_b, nsa, nsb, SETS, LINE) == pytest.approx(
        naive_phase_share(layer, kernel))


@pytest.mark.parametrize("h, r, tile_m, tile_k, threads, vector, gpu", [(12, 7, 64, 16, 64, 4, "v100"),
                                                                       (14, 3, 128, 32, 256, 1, "titanxp")])
def test_dy_apart_from_the_filters_sets(h, r, tile_m, tile_k, threads, vector, gpu):
    """dy rows of 512 bytes (K = 128 fp32) fill one set a k-step; a CTA column's 32 filters' lines fill one
    set too, the same one in a quarter of the k-steps: an earlier slot's filter lines survive in the rest.
    Counted as always in one set, B's L2 reads came out +39 / +19 %."""
    g = dataclasses.replace(simcore.gpu(gpu), sms=4)
    s = 1 if r == 7 else r
    layer = traces.ConvLayer(name="d", n=4, c=128, h=h, w=h, k=128, r=r, s=s, pad=(r // 2, s // 2))
    kernel = traces.KernelConfig(tile_m=tile_m, tile_n=32, tile_k=tile_k, threads=threads, vector=vector,
                                 op="dgrad")
    key = "lts__t_sectors_srcunit_tex_op_read.sum:B"
    simulated = traces.simulate_layer(layer, g, kernel)[key]
    assert analytic.predict_layer(layer, g, kernel)[key] == pytest.approx(simulated, rel=0.05)
