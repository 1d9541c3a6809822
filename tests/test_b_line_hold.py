"""A filter line read over several k-steps (`_geometry.b_line_hold`): the share of a CTA lifetime from
its first read to its last and the widest gap between reads, against the k-steps of every element of a
filter row enumerated in DESIGN section 3's GEMM-K order; and, simulated, the previous wave's filter
slice found in the L1 where only the rest of a lifetime lies between."""
import dataclasses

import pytest
from hypothesis import given, settings, strategies as st

import analytic
import simcore
import traces
from analytic._geometry import b_line_hold

LINE = 128


def naive_line_spans(layout, C, R, S, tk, eb):
    """(share of the k-steps from a line's first read to its last, widest gap between its reads) of
    each full line of filter 0 (row at byte 0), from every element's k-step (nhwc: k-step
    (c // tk) R S + r S + s of element (r, s, c) at (r S + s) C + c; nchw: element gk at gk, k-step gk // tk)."""
    RS = R * S
    nblk = -(-C // tk)
    ksteps = RS * nblk if layout == "nhwc" else -(-C * RS // tk)
    steps = {}
    for r in range(R):
        for s in range(S):
            for c in range(C):
                pos = (r * S + s) * C + c
                if layout == "nhwc":
                    step = (c // tk) * RS + r * S + s
                else:
                    step = pos // tk
                steps.setdefault(pos * eb // LINE, set()).add(step)
    full = (RS * C * eb) // LINE
    out = []
    for line in range(full):
        touched = sorted(steps[line])
        gaps = [b - a for a, b in zip(touched, touched[1:])] or [1]
        out.append(((touched[-1] - touched[0]) / ksteps, max(gaps)))
    return out


@given(st.sampled_from(["nhwc", "nchw"]), st.sampled_from([32, 48, 64, 96, 128, 192, 256]),
       st.sampled_from([8, 16, 32]), st.sampled_from([2, 4]))
@settings(max_examples=60, deadline=None)
def test_b_line_hold_is_every_full_line_of_a_1x1_row(layout, C, tk, eb):
    """1x1 rows whose lines hold whole k-step blocks: every full line has the closed form's span and gap."""
    if (C * eb) % LINE or LINE % (tk * eb):
        return
    hold, gap = b_line_hold(layout, C, 1, 1, tk, eb, LINE)
    for share, widest in naive_line_spans(layout, C, 1, 1, tk, eb):
        assert share == pytest.approx(hold)
        assert widest == gap


def test_b_line_hold_by_hand():
    # 1x1 nchw fp32, T_k = 8: a 128-byte line is 32 channels, read over 4 of 8 k-steps
    assert b_line_hold("nchw", 64, 1, 1, 8, 4, LINE) == (3 / 8, 1.0)
    # a k-step reads a whole line (T_k e = 128 bytes): no span
    assert b_line_hold("nhwc", 64, 1, 1, 32, 4, LINE) == (0.0, 1.0)
    # filters wider than 1x1 are not held (their A windows overlap between k-steps)
    assert b_line_hold("nhwc", 64, 3, 3, 8, 4, LINE) == (0.0, 1.0)
    # one k-step: nothing between
    assert b_line_hold("nchw", 8, 1, 1, 8, 4, LINE) == (0.0, 1.0)


@pytest.mark.parametrize("c, l1_bytes", [(32, 16384), (64, 32768)])
def test_previous_waves_filter_lines_found_in_l1(c, l1_bytes):
    """1x1 nchw fp32 on 4 SMs, 2 CTAs each, every CTA of one filter tile: a lifetime's lines (each CTA's
    A lines of 64 rows x C channels, 20x20 planes, and the 24 filters) overflow the L1, but each filter
    line is read over 4 of C / 8 k-steps, so each SM reads the filter slice from L2 once."""
    gpu = dataclasses.replace(simcore.gpu("titanxp"), sms=4, l1_smem_bytes=l1_bytes)
    layer = traces.ConvLayer(name="pw", n=8, c=c, h=20, w=20, k=24, r=1, s=1)
    kernel = traces.KernelConfig(tile_m=64, tile_n=32, tile_k=8, threads=256, layout="nchw")
    key = "lts__t_sectors_srcunit_tex_op_read.sum:B"
    simulated = traces.simulate_layer(layer, gpu, kernel)[key]
    assert simulated == gpu.sms * 24 * c * 4 // 32
    assert analytic.predict_layer(layer, gpu, kernel)[key] == pytest.approx(simulated, rel=0.05)
