"""The rows' classes of sets in the grouped model's issue order (`analytic._grouped_rereads._issue_order`):
where pixels are whole lines and a tap's rows reach several L1 sets, each row's pixel sits in one of
them, and the rows a warp issues may all sit in one. The lines between two reads of a pixel in its set are
then its class's rows read between, not a share of all the requests (`_jittered_miss`).

Checked against the generated request stream (the rows each request of a k-step reads, from its sector
addresses, and their sets by the L1's linear index), and against simulation on a depthwise layer whose two
warps read alternate rows, each warp's pixels of a tap in one set."""
import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

import analytic
import simcore
import traces
from analytic._grouped_rereads import _issue_head, _issue_order, tap_phases
from simcore import metrics as M
from traces.stream import iter_request_chunks

A_MISSES = M.L1_LD_MISSES + ":A"


def stream_rows(layer, kernel, gpu):
    """{row of CTA 0's first tile: (index of the request of k-step 0 that reads it, its pixel's first line)},
    from the stream's A requests (a 1x1 filter, no padding: every row's pixel is in the image)."""
    unit = layer.c * kernel.elem_bytes
    rows = {}
    for chunk in iter_request_chunks(layer, gpu, kernel):
        picks = np.nonzero((chunk.cta == 0) & (chunk.operand == 0) & (chunk.kstep == 0))[0]
        for index, r in enumerate(picks):
            for j in range(chunk.first[r], chunk.first[r] + chunk.count[r]):
                address = int(chunk.sectors[j])
                pixel = address // unit
                image, rest = divmod(pixel, layer.h * layer.w)
                h, w = divmod(rest, layer.w)
                row = (image * layer.p + h // layer.stride[0]) * layer.q + w // layer.stride[1]
                line = pixel * unit // gpu.line_bytes
                rows.setdefault(row, (index, line))
        break
    return rows


def counted_classes(rows, sets):
    """Per row: its class's rows issued after it, before it (a row of its own request counts half to each),
    and in all (itself included), by the rows' sets (line mod sets)."""
    out = {}
    for m, (req, line) in rows.items():
        ahead = behind = 0.0
        same = 0
        for r, (req_r, line_r) in rows.items():
            if line_r % sets != line % sets:
                continue
            same += 1
            if r == m:
                continue
            if req_r > req:
                ahead += 1.0
            elif req_r < req:
                behind += 1.0
            else:
                ahead += 0.5
                behind += 0.5
        out[m] = (ahead, behind, same)
    return out


@settings(max_examples=40, deadline=None)
@given(c_lines=st.integers(1, 7), dtype=st.sampled_from(["fp32", "fp16"]), stride=st.sampled_from([1, 2]),
       n=st.integers(1, 2), h=st.integers(2, 9), w=st.integers(2, 9), tile_m=st.sampled_from([32, 64, 128]),
       threads=st.sampled_from([64, 128, 256]), tile_k=st.sampled_from([8, 16, 32]))
def test_row_classes_are_the_streams(c_lines, dtype, stride, n, h, w, tile_m, threads, tile_k):
    eb = 4 if dtype == "fp32" else 2
    c = c_lines * 128 // eb
    layer = traces.ConvLayer(n, c, h, w, c, 1, 1, stride=stride, groups=c, name="dw")
    try:
        kernel = traces.KernelConfig(tile_m=tile_m, tile_n=32, tile_k=tile_k, threads=threads, dtype=dtype)
    except ValueError:                               # a thread map that does not tile both operands
        assume(False)
    gpu = simcore.gpu("v100")
    sets = kernel.l1_config(gpu).sets
    order = _issue_order(layer, kernel, sets, gpu.line_bytes)
    reach = tap_phases(layer, eb, sets, gpu.line_bytes)[2]
    rows = int(order[4])
    assert order[:4].tolist() == _issue_head(kernel)[:4].tolist()
    if reach == 1:                                  # one set: the requests between say it all
        assert rows == 0
        return
    assert rows == min(tile_m, layer.gemm_m)
    want = counted_classes(stream_rows(layer, kernel, gpu), sets)
    assert sorted(want) == list(range(rows))
    for m in range(rows):
        got = (order[5 + m], order[5 + rows + m], order[5 + 2 * rows + m])
        assert got == pytest.approx(want[m]), m


def test_pixels_not_whole_lines_have_no_classes():
    layer = traces.ConvLayer(1, 48, 8, 8, 48, 3, 3, pad=1, groups=48, name="dw48")
    kernel = traces.KernelConfig(tile_m=64, tile_n=32, tile_k=16, threads=64)
    assert _issue_order(layer, kernel, 4, 128).tolist() == _issue_head(kernel).tolist()


def test_warps_of_one_set_each_match_simulation():
    """Seed 19 #10's shape, one image: 1x7 depthwise, C 384 fp16 (6 lines a pixel, alternate pixels in two
    sets), two warps reading alternate rows of 256-row tiles on a TITAN Xp's 48 KB L1. Each warp's rows of a
    tap lie in one set, so a pixel read one tap on sees a whole k-step's lines of its set between: replayed,
    every such re-read of a full tile misses. Counting a share of the requests between, half of them came
    half a k-step on and hit: A's L1 misses were 43 % low."""
    layer = traces.ConvLayer(1, 384, 16, 16, 384, 1, 7, pad=(0, 3), groups=384, name="dw1x7")
    kernel = traces.KernelConfig(tile_m=256, tile_n=128, tile_k=32, threads=64, dtype="fp16")
    gpu = simcore.gpu("titanxp")
    sim = traces.simulate_layer(layer, gpu, kernel)[A_MISSES]
    pred = analytic.predict_layer(layer, gpu, kernel)[A_MISSES]
    assert abs(pred - sim) / sim < 0.05, (pred, sim)


@settings(max_examples=40, deadline=None)
@given(c_lines=st.integers(1, 7), dtype=st.sampled_from(["fp32", "fp16"]), tile_m=st.sampled_from([32, 64, 128, 256]),
       threads=st.sampled_from([64, 128, 256]), tile_k=st.sampled_from([8, 16, 32]), d=st.integers(1, 9),
       dms=st.lists(st.integers(-40, 40), min_size=1, max_size=6, unique=True), window=st.floats(10, 400),
       scale=st.floats(0.001, 0.02), others=st.floats(0, 3), b_lines=st.floats(0, 0.3))
def test_class_shifts_table_is_the_row_by_row_mean(c_lines, dtype, tile_m, threads, tile_k, d, dms, window, scale,
                                                   others, b_lines):
    """`_jittered_miss` on `_class_shifts`' table: the mean over the tile's rows m (m + dm in the tile) of the
    miss at its own window, f = (its class's rows after m + before m + dm + 1 + (d - 1) S) / (d S)."""
    from analytic._grouped_rereads import _class_shifts, _jittered_miss, _miss_ramp
    eb = 4 if dtype == "fp32" else 2
    c = c_lines * 128 // eb
    layer = traces.ConvLayer(2, c, 9, 11, c, 3, 3, pad=1, groups=c, name="dw")
    try:
        kernel = traces.KernelConfig(tile_m=tile_m, tile_n=32, tile_k=tile_k, threads=threads, dtype=dtype)
    except ValueError:
        assume(False)
    order = _issue_order(layer, kernel, 4, 128)
    rows = int(order[4])
    assume(rows > 0)
    ahead, behind, same = order[5:5 + rows], order[5 + rows:5 + 2 * rows], order[5 + 2 * rows:]
    table = _class_shifts(order, np.array(sorted(dms), np.int64))
    lo, hi = 0.95, 1.1
    for dm in dms:
        ms = range(max(0, -dm), min(rows, rows - dm))
        if not ms:
            continue
        want = sum(_miss_ramp(scale * (min(500.0, 450.0, window * (ahead[m] + behind[m + dm] + 1 + (d - 1) * same[m])
                                              / (d * same[m])) + others * min(500.0, window)) + b_lines, lo, hi)
                   for m in ms) / len(ms)
        got = _jittered_miss(window, 450.0, 500.0, scale, others, b_lines, d, dm, table, lo, hi)
        assert got == pytest.approx(want, abs=1e-9)
