"""What lies between two CTAs' reads of a filter line when the SM runs them one after the other (PREV_B):
`analytic._filter_gaps.line_gaps` (per filter line, the longest stretch of k-steps without a read of it,
cyclically over CTA after CTA) against the generated request stream; the grouped model's distinct pixel
lines of a CTA lifetime (`_grouped_model._row_lines_per_pixel`) against a byte-by-byte count; and the
layers whose filter re-reads across waves these fixed, against simulation."""
import collections

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import analytic
import simcore
import traces
from analytic._filter_gaps import b_line_gaps, line_gaps
from analytic._grouped_model import _column_channels, _row_lines_per_pixel
from analytic.factors import ReuseFactors
from simcore import metrics as M
from traces.stream import iter_request_chunks
from validation.random_cases import random_case

LINE = 128


def longest_absences(steps, ksteps):
    """Per line (``steps``: line -> the k-steps reading it), the longest cyclic run of k-steps without a read
    (between two reads, or from the last read round to the first), sorted."""
    out = []
    for ks in steps.values():
        srt = sorted(ks)
        cyc = srt + [srt[0] + ksteps]
        out.append(max(b - a - 1 for a, b in zip(cyc, cyc[1:])))
    return sorted(out)


def stream_gaps(layer, kernel, gpu):
    """The slow reference: CTA 0's filter lines and the k-steps it reads each at, from the generated
    stream; per line, the longest cyclic run of k-steps without a read (k-steps between two reads, or from
    the last read round to the first)."""
    steps = collections.defaultdict(set)
    ksteps = 0
    for chunk in iter_request_chunks(layer, gpu, kernel):
        for r in range(chunk.cta.shape[0]):
            if int(chunk.cta[r]) != 0:
                continue
            if chunk.kind[r] == 1:                                   # stores: kstep = the CTA's k-steps
                ksteps = int(chunk.kstep[r])
                continue
            if chunk.operand[r] != 1:
                continue
            for j in range(chunk.first[r], chunk.first[r] + chunk.count[r]):
                steps[int(chunk.sectors[j]) // LINE].add(int(chunk.kstep[r]))
    return longest_absences(steps, ksteps)


@pytest.mark.parametrize("layer, kernel", [
    # nchw fp16 5x5 C 4: 200-byte filter rows, lines shared by two rows (62 #85's filters)
    (traces.ConvLayer(1, 4, 20, 20, 64, 5, 5, stride=3, pad=2),
     traces.KernelConfig(tile_m=64, tile_n=64, tile_k=32, threads=64, layout="nchw", dtype="fp16")),
    # nhwc fp32 7x7 C 8: 32-byte taps, a line holds 4 taps of one row
    (traces.ConvLayer(1, 8, 16, 16, 32, 7, 7, stride=2, pad=3),
     traces.KernelConfig(tile_m=32, tile_n=32, tile_k=8, threads=64)),
    # nhwc 1x1 C 24 fp32: one k-step, every line read once a lifetime (62 #79's filters)
    (traces.ConvLayer(1, 24, 12, 12, 64, 1, 1, stride=2),
     traces.KernelConfig(tile_m=32, tile_n=32, tile_k=32, threads=128)),
    # nhwc C 40 fp16 3x3, two channel blocks (the second partial)
    (traces.ConvLayer(1, 40, 10, 10, 32, 3, 3, pad=1),
     traces.KernelConfig(tile_m=32, tile_n=32, tile_k=32, threads=128, dtype="fp16")),
    # nchw fp32 1x1 C 96: 384-byte rows, each line read at 2 consecutive k-steps
    (traces.ConvLayer(1, 96, 8, 8, 64, 1, 1),
     traces.KernelConfig(tile_m=32, tile_n=64, tile_k=16, threads=128, layout="nchw")),
])
def test_line_gaps_match_the_stream(layer, kernel):
    gpu = simcore.gpu("v100")
    got = line_gaps(kernel.layout, layer.c, layer.r, layer.s, layer.k, kernel.tile_n, kernel.tile_k,
                    kernel.elem_bytes, LINE)
    assert got.tolist() == stream_gaps(layer, kernel, gpu)


@settings(max_examples=60, deadline=None)
@given(c=st.integers(1, 70), r=st.integers(1, 5), s=st.integers(1, 5), k=st.integers(1, 80),
       tn=st.sampled_from([32, 64, 128]), tk=st.sampled_from([8, 16, 32]), eb=st.sampled_from([2, 4]),
       layout=st.sampled_from(["nhwc", "nchw"]))
def test_gap_classes_keep_every_line(c, r, s, k, tn, tk, eb, layout):
    gaps = line_gaps(layout, c, r, s, k, tn, tk, eb, LINE)
    ksteps = r * s * -(-c // tk) if layout == "nhwc" else -(-(c * r * s) // tk)
    assert gaps.min() >= 0 and gaps.max() <= ksteps - 1
    cls = b_line_gaps(layout, c, r, s, k, tn, tk, eb, LINE)
    assert cls[1].sum() == pytest.approx(1.0)
    assert float(cls[0] @ cls[1]) == pytest.approx(gaps.mean())          # the classes keep the mean gap
    assert cls[0].min() >= gaps.min() and cls[0].max() <= gaps.max()


def slow_line_gaps(layout, c, r, s, k, tn, tk, eb, line):
    """Pure Python: every filter row of the slice, every k-step's chunk (DESIGN section 3's order), the
    k-steps each line is read at, and each line's longest cyclic absence of reads."""
    rs_n = r * s
    if layout == "nhwc":
        nblk = -(-c // tk)
        chunks = [(b * rs_n + p, p * c * eb + b * tk * eb, min(tk, c - b * tk) * eb)
                  for b in range(nblk) for p in range(rs_n)]
    else:
        chunks = [(j, j * tk * eb, min(tk, c * rs_n - j * tk) * eb) for j in range(-(-(c * rs_n) // tk))]
    ksteps = len(chunks)
    steps = collections.defaultdict(set)
    for row in range(min(tn, k)):
        for ks, off, size in chunks:
            start = row * rs_n * c * eb + off
            for ln in range(start // line, (start + size - 1) // line + 1):
                steps[ln].add(ks)
    return longest_absences(steps, ksteps)


@settings(max_examples=80, deadline=None)
@given(c=st.integers(1, 40), r=st.integers(1, 3), s=st.integers(1, 3), k=st.integers(1, 256),
       tn=st.sampled_from([32, 64, 128, 256]), tk=st.sampled_from([8, 16, 32]), eb=st.sampled_from([2, 4]),
       layout=st.sampled_from(["nhwc", "nchw"]))
def test_line_gaps_periods_match_every_row_enumerated(c, r, s, k, tn, tk, eb, layout):
    # past a few periods of rows `line_gaps` counts whole periods; a row-by-row enumeration agrees exactly
    assert line_gaps(layout, c, r, s, k, tn, tk, eb, LINE).tolist() == \
        slow_line_gaps(layout, c, r, s, k, tn, tk, eb, LINE)


def slow_row_lines(layer, kernel, line):
    """Byte by byte: per CTA column, the lines that the bytes of its channel range in every pixel the taps
    read along one image row touch; their mean over the columns, per read pixel."""
    (sw, pw, dw) = layer.stride[1], layer.pad[1], layer.dilation[1]
    touched = {q * sw + t * dw - pw for q in range(layer.q) for t in range(layer.s)}
    touched = {w for w in touched if 0 <= w < layer.w}
    eb, cols, total = kernel.elem_bytes, -(-layer.k // kernel.tile_n), 0
    for col in range(cols):
        ch = _column_channels(layer, kernel, col)
        if ch is None:
            continue
        total += len({(w * layer.c * eb + b) // line for w in touched for b in range(ch[0] * eb, ch[1] * eb)})
    return total / (len(touched) * cols)


@settings(max_examples=60, deadline=None)
@given(cg=st.integers(1, 12), groups=st.sampled_from([2, 4, 8]), kg=st.sampled_from([1, 2, 8, 16]),
       w=st.integers(3, 60), s=st.integers(1, 7), sw=st.integers(1, 4), dw=st.integers(1, 2),
       tn=st.sampled_from([16, 32, 64]), eb=st.sampled_from([2, 4]))
def test_row_lines_per_pixel_counts_bytes(cg, groups, kg, w, s, sw, dw, tn, eb):
    if not (kg % tn == 0 or tn % kg == 0) or (s - 1) * dw >= w:
        return
    layer = traces.ConvLayer(1, cg * groups, 3, w, kg * groups, 1, s, stride=(1, sw), pad=(0, (s - 1) // 2),
                             dilation=(1, dw), groups=groups)
    kernel = traces.KernelConfig(tile_m=32, tile_n=tn, tile_k=8, threads=64, dtype="fp16" if eb == 2 else "fp32")
    assert _row_lines_per_pixel(layer, kernel, LINE) == pytest.approx(slow_row_lines(layer, kernel, LINE), rel=1e-12)


F = ReuseFactors.load("validation/data/factors.json")
L2 = M.L2_RD_SECTORS


@pytest.mark.parametrize("case, tolerance", [
    # one k-step, 3 CTAs of a column an SM: the next wave's first holder finds the slice a round after the
    # last sharer's read (L2 reads +26.5 % before; +5.8 % after)
    ((62, 79), 0.10),
    # 200-byte nchw filter rows: lines two rows share are read at a lifetime's ends (+17.8 % before; +2.6 %)
    ((62, 85), 0.05),
    # nchw fp16 C 8 5x5: k-steps read channel planes in turn (+19.5 % before; -2.4 %)
    ((62, 49), 0.05),
])
def test_filter_rereads_across_waves_against_simulation(case, tolerance):
    c = random_case(*case)
    sim = traces.simulate_layer(c.layer, c.gpu, c.kernel)
    pred = analytic.predict_layer(c.layer, c.gpu, c.kernel, F)
    assert abs(pred[L2] - sim[L2]) <= tolerance * sim[L2]


def test_grouped_lifetime_lines_against_simulation():
    # 62 #88 at batch 8: 32-byte pixels read side by side by 7x7 stride-4 taps, one CTA an SM: a lifetime's
    # lines fit the L1 and the next CTA finds the filters (filter L1 misses +115 % before, exact after)
    c = random_case(62, 88)
    layer = traces.ConvLayer(8, c.layer.c, c.layer.h, c.layer.w, c.layer.k, c.layer.r, c.layer.s,
                             stride=c.layer.stride, pad=c.layer.pad, groups=c.layer.groups)
    sim = traces.simulate_layer(layer, c.gpu, c.kernel)
    pred = analytic.predict_layer(layer, c.gpu, c.kernel, F)
    key = f"{M.L1_LD_MISSES}:B"
    assert abs(pred[key] - sim[key]) <= 0.05 * sim[key]
    assert abs(pred[L2] - sim[L2]) <= 0.03 * sim[L2]


def test_dgrad_one_column_rereads_the_next_positions_sectors():
    # 62 #80: dgrad, C 24 fp16 (48-byte filter positions, off the sector grid), one CTA column: each k-step's
    # rows end in the sector the next position's begin in; a quarter of the filter lookups hit (L2 reads
    # +33.6 % before, +4.3 % after)
    c = random_case(62, 80)
    sim = traces.simulate_layer(c.layer, c.gpu, c.kernel)
    pred = analytic.predict_layer(c.layer, c.gpu, c.kernel, F)
    key = f"{M.L1_LD_HITS}:B"
    assert sim[key] > 0.2 * sim[f"{M.L1_LD_SECTORS}:B"]
    assert abs(pred[key] - sim[key]) <= 0.02 * sim[key]
    assert abs(pred[L2] - sim[L2]) <= 0.08 * sim[L2]


def test_a_slice_two_waves_back_is_found_against_simulation():
    # 67 #52's kernel (nchw fp16 3x3 C 48, 64 filters of 864 bytes a CTA, swizzle 2: four columns a band) on 198
    # SMs of one CTA each: SM s runs blocks s + 198 w, so its column alternates wave by wave (198 = 2 mod 4) and
    # the slice it read two waves back (55 KB) is still in its 256 KB L1. With the previous wave's alone
    # (PREV_B), no B hit was predicted; simulated 39 %
    layer = traces.ConvLayer(n=4, c=48, h=72, w=72, k=1024, r=3, s=3, pad=1, name="b")
    kernel = traces.KernelConfig(tile_m=128, tile_n=64, tile_k=32, threads=256, dtype="fp16", layout="nchw",
                                 swizzle_log=2, ctas_per_sm=1)
    gpu = simcore.scale_gpu(simcore.gpu("h100"), {"sms": 1.5})
    sim = traces.simulate_layer(layer, gpu, kernel)
    pred = analytic.predict_layer(layer, gpu, kernel)
    key = M.L1_LD_HITS + ":B"
    assert sim[key] > 0.3 * sim[M.L1_LD_SECTORS + ":B"]
    assert pred[key] == pytest.approx(sim[key], rel=0.03)
