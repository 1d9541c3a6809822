"""wgrad's x reuse and windows (`analytic._wgrad`: `pixel_reuse_ranges`, `union_window`,
`a_set_share`, `x_wave_rereads`) against element-by-element, line-by-line and CTA-by-CTA enumeration."""
import collections

import numpy as np
from hypothesis import given, settings, strategies as st

from analytic._schedule import GAP_MAX
from analytic._wgrad import a_set_share, pixel_reuse_ranges, swept_lines, union_window, window_keys, x_wave_rereads

from tests.naive_schedule import naive_valid_blocks

LINE = 128


def naive_reuse(N, C, H, W, R, S, sh, sw, ph, pw, dh, dw, P, Q, ranges):
    """(accesses, first, {distance: accesses}): every (row npq, column rsc) of the ranges that reads a
    valid pixel, its element's nearest earlier read (a smaller npq, any column) by distance in rows."""
    last = {}
    total, first, hist = 0, 0, collections.Counter()
    for npq in range(N * P * Q):
        n, p, q = npq // (P * Q), npq // Q % P, npq % Q
        seen = []
        for lo, hi in ranges:
            for col in range(lo, hi):
                j, c = divmod(col, C)
                r, s = divmod(j, S)
                h, w = p * sh - ph + r * dh, q * sw - pw + s * dw
                if not (0 <= h < H and 0 <= w < W):
                    continue
                key = (n, h, w, c)
                total += 1
                if key in last:
                    hist[npq - last[key]] += 1
                else:
                    first += 1
                seen.append(key)
        for key in seen:
            last[key] = npq
    return total, first, hist


def _reuse(N, C, H, W, R, S, sh, sw, ph, pw, dh, dw, ranges):
    P = (H + 2 * ph - (R - 1) * dh - 1) // sh + 1
    Q = (W + 2 * pw - (S - 1) * dw - 1) // sw + 1
    lo = np.array([a for a, _ in ranges], np.int64)
    hi = np.array([b for _, b in ranges], np.int64)
    got = pixel_reuse_ranges(N, C, H, W, R, S, sh, sw, ph, pw, dh, dw, P, Q, lo, hi)
    return got, naive_reuse(N, C, H, W, R, S, sh, sw, ph, pw, dh, dw, P, Q, ranges)


def test_disjoint_channels_of_two_predecessors_are_both_reuses():
    # a 3x3 filter over 8 channels on 6x6 (4x4 outputs): position 0 reads channels [0, 8); position 1
    # read channels [0, 4) of the same pixel one row earlier, position 4 channels [4, 8) Q + 1 = 5 rows
    # earlier. Both halves are reuses (the largest-overlap-so-far rule over the whole interval counted
    # only the first: 208 first reads, not 172)
    (total, first, dist, wt), (t2, f2, h2) = _reuse(1, 8, 6, 6, 3, 3, 1, 1, 0, 0, 1, 1, [(0, 12), (36, 40)])
    assert (total, first) == (t2, f2)
    assert first == 172
    assert dict(zip(dist.tolist(), wt.tolist())) == {k: float(v) for k, v in h2.items()} == {1: 48.0, 5: 36.0}


@settings(max_examples=40, deadline=None)
@given(C=st.integers(1, 12), H=st.integers(3, 9), W=st.integers(3, 9), R=st.integers(1, 3), S=st.integers(1, 3),
       pad=st.integers(0, 1), tiles=st.lists(st.integers(0, 6), min_size=1, max_size=3, unique=True),
       tn=st.sampled_from([4, 8, 16]))
def test_pixel_reuse_ranges_against_enumeration(C, H, W, R, S, pad, tiles, tn):
    ranges = [(t * tn, min(t * tn + tn, R * S * C)) for t in sorted(tiles) if t * tn < R * S * C]
    if not ranges:
        return
    (total, first, dist, wt), (t2, f2, h2) = _reuse(2, C, H, W, R, S, 1, 1, pad, pad, 1, 1, ranges)
    assert total == t2
    got = dict(zip(dist.tolist(), wt.tolist()))
    assert abs(sum(got.values()) + first - total) < 1e-6 * total
    # each predecessor covers a rectangle of output pixels; per channel stretch the model keeps the
    # largest so far, exact where they nest (one filter row without padding: intervals of q anchored
    # at one end), never more reuse than there is otherwise
    if R == 1 and pad == 0:
        assert first == f2
        assert got == {k: float(v) for k, v in h2.items()}
    assert f2 <= first <= f2 + 0.25 * t2


@settings(max_examples=60, deadline=None)
@given(C=st.sampled_from([32, 48, 64, 96, 128, 160]), eb=st.sampled_from([2, 4]), sw=st.integers(1, 2),
       S=st.integers(1, 5), W=st.integers(5, 20), dh=st.integers(1, 2), dw=st.integers(1, 2),
       tiles=st.lists(st.integers(0, 12), min_size=1, max_size=3, unique=True), tn=st.sampled_from([32, 64, 128]),
       rows=st.integers(1, 60))
def test_union_window_against_line_enumeration(C, eb, sw, S, W, dh, dw, tiles, tn, rows):
    if (sw * C * eb) % LINE:
        return
    lo = np.array(sorted(tiles), np.int64) * tn
    hi = lo + tn
    lines = enumerated_lines(C, S, W, sw, dh, dw, eb, lo, hi, rows)
    assert union_window(window_keys(C, S, W, sw, dh, dw, eb, lo, hi, LINE), float(rows)) == len(lines)


def enumerated_lines(C, S, W, sw, dh, dw, eb, lo, hi, rows):
    """The lines of every element the columns [lo[i], hi[i]) read over ``rows`` npq rows of one output row
    (column rsc at row i: pixel (r dh, s dw + i sw) of the window, channel c; elements never straddle a line)."""
    lines = set()
    for a, b in zip(lo, hi):
        for col in range(a, b):
            j, c = divmod(col, C)
            base = ((j // S) * dh * W + (j % S) * dw) * C * eb + c * eb
            for i in range(rows):
                lines.add((base + i * sw * C * eb) // LINE)
    return lines


@settings(max_examples=80, deadline=None)
@given(C=st.sampled_from([3, 8, 24, 32, 48, 96, 100, 160]), eb=st.sampled_from([2, 4]), sw=st.integers(1, 3),
       S=st.integers(1, 5), W=st.integers(5, 20), dh=st.integers(1, 2), dw=st.integers(1, 3),
       tiles=st.lists(st.integers(0, 12), min_size=1, max_size=3, unique=True), tn=st.sampled_from([16, 32, 64, 128]),
       rows=st.integers(1, 60))
def test_swept_lines_against_line_enumeration(C, eb, sw, S, W, dh, dw, tiles, tn, rows):
    """Any pixel pitch (the lines-aligned ones too): every element each column reads over the rows, in lines."""
    lo = np.array(sorted(tiles), np.int64) * tn
    hi = lo + tn
    lines = enumerated_lines(C, S, W, sw, dh, dw, eb, lo, hi, rows)
    assert swept_lines(C, S, W, sw, dh, dw, eb, lo, hi, LINE, rows) == len(lines)


def test_dilated_windows_against_simulation():
    """64 #32 (3x3 dilation 2 over 192-byte pixels, fp16, 256-column tiles): a column tile's pieces of one filter
    row read pixels q - 2, q and q + 2, and its re-reads one filter row on (78-80 npq rows, 5 k-steps) all hit the
    L1 simulated. x's L1 hits within 1 % (the pieces' windows summed: -27 %)."""
    import analytic
    import traces
    from validation.random_cases import random_case
    c = random_case(64, 32)
    f = analytic.ReuseFactors.load("validation/data/factors.json")
    sim = traces.simulate_layer(c.layer, c.gpu, c.kernel)
    pred = analytic.predict_layer(c.layer, c.gpu, c.kernel, f)
    key = "l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum:B"
    assert abs(pred[key] - sim[key]) / sim[key] < 0.01


@settings(max_examples=60, deadline=None)
@given(K=st.integers(1, 64), tm=st.sampled_from([16, 32, 64, 128]), eb=st.sampled_from([2, 4]),
       sets=st.sampled_from([1, 2, 4, 8]), tms=st.lists(st.integers(0, 7), min_size=1, max_size=3, unique=True))
def test_a_set_share_against_rows(K, tm, eb, sets, tms):
    K *= 16
    tms = [t for t in tms if t * tm < K] or [0]
    pitch = K * eb
    reached = set()
    for row in range(4 * sets * LINE):
        for t in tms:
            a = row * pitch + t * tm * eb
            for ln in range(a // LINE, (a + tm * eb - 1) // LINE + 1):
                reached.add(ln % sets)
    want = len(reached) / sets if pitch % LINE == 0 else 1.0
    assert abs(a_set_share(np.array(sorted(tms), np.int64), tm, eb, pitch, sets, LINE) - want) < 1e-12


@settings(max_examples=60, deadline=None)
@given(tiles_m=st.integers(1, 12), C=st.integers(1, 40), R=st.integers(1, 3), S=st.integers(1, 3),
       tn=st.sampled_from([4, 8, 16, 32]), swz=st.integers(0, 2), per_wave=st.integers(1, 40))
def test_x_wave_rereads_against_the_dispatch(tiles_m, C, R, S, tn, swz, per_wave):
    RS = R * S
    tiles_n = -(-RS * C // tn)
    blocks = naive_valid_blocks(tiles_m, tiles_n, swz)
    samples = 4
    want = np.zeros(GAP_MAX + 1)
    for i in range(samples):
        c = int((i + 0.5) * C / samples)
        columns = {min((j * C + c) // tn, tiles_n - 1) for j in range(RS)}
        waves = sorted({v // per_wave for v, (_, t) in enumerate(blocks) if t in columns})
        for a, b in zip(waves, waves[1:]):
            want[min(b - a, GAP_MAX)] += 1.0 / samples
    got = x_wave_rereads(tiles_m, tiles_n, swz, per_wave, tn, C, RS, samples)
    assert np.allclose(got, want)
