"""The grouped model's re-reads (`analytic._grouped_model`): which tile re-reads a pixel at which taps, where
the two rows sit in the k-step's issue order, how many CTAs share an SM, against slow references; and
the L1 misses they give against simulation."""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import analytic
import simcore
import traces
from analytic._counts import _ramp
from analytic._grouped_rereads import (_axis_arrays, _between, _cross_windows, _issue_head, _jittered_miss, _merged,
                                     _tile_rereads, _unique_rows, residency_classes)
from simcore import metrics as Mx
from traces import ConvLayer, KernelConfig

from .naive_schedule import _dispatch


@settings(max_examples=40, deadline=None)
@given(h=st.integers(1, 12), w=st.integers(1, 12), r=st.integers(1, 4), s=st.integers(1, 4), sh=st.integers(1, 3),
       sw=st.integers(1, 3), dil=st.integers(1, 3), pad=st.integers(0, 3), tm=st.sampled_from([4, 16, 64]))
def test_tile_rereads_follow_every_tile_position(h, w, r, s, sh, sw, dil, pad, tm):
    # naive: every input pixel of one image with its reads (tap t = r S + s, output row m = p Q + q) in tap
    # order; a tile starting u rows from... every integer u whose [u, u + T_m) holds one of its reads, 1 / T_m
    # each: the reads inside, consecutive ones re-read (t, d, dm), the last against the first one group on
    P = (h + 2 * pad - (r - 1) * dil - 1) // sh + 1
    Q = (w + 2 * pad - (s - 1) * dil - 1) // sw + 1
    if P < 1 or Q < 1:
        return
    want_intra, want_cross, want_pairs = defaultdict(float), defaultdict(float), 0.0
    want_longest = defaultdict(float)
    for y in range(h):
        for x in range(w):
            reads = [(i * s + j, ((y + pad - i * dil) // sh) * Q + (x + pad - j * dil) // sw)
                     for i in range(r) for j in range(s)
                     if (y + pad - i * dil) % sh == 0 and 0 <= (y + pad - i * dil) // sh < P
                     and (x + pad - j * dil) % sw == 0 and 0 <= (x + pad - j * dil) // sw < Q]
            if not reads:
                continue
            ms = [m for _t, m in reads]
            for u in range(min(ms) - tm + 1, max(ms) + 1):
                inside = [(t, m) for t, m in reads if u <= m < u + tm]
                if not inside:
                    continue
                want_pairs += 1 / tm
                for (t0, m0), (t1, m1) in zip(inside, inside[1:]):
                    want_intra[(t1, t1 - t0, m1 - m0)] += 1 / tm
                (t0, m0), (t1, m1) = inside[-1], inside[0]
                want_cross[(t0, t1, m1 - m0)] += 1 / tm        # (last tap, first tap, rows on)
                # the pair's longest re-read: the next group's where no re-read inside is longer, else the
                # first of the longest inside
                gaps = [(t1_ - t0_, t1_, m1_ - m0_) for (t0_, m0_), (t1_, m1_) in zip(inside, inside[1:])]
                if not gaps or r * s - t0 + t1 >= max(g[0] for g in gaps):
                    want_longest[(1, t0, t1, m1 - m0)] += 1 / tm
                else:
                    d, t, dm = next(g for g in gaps if g[0] == max(x[0] for x in gaps))
                    want_longest[(0, t, d, dm)] += 1 / tm
    intra, cross, pairs, longest = _tile_rereads(*_axis_arrays(P, h, sh, pad, dil, r),
                                                 *_axis_arrays(Q, w, sw, pad, dil, s), s, Q, tm, r * s)
    got_longest = {tuple(int(v) for v in row[:4]): row[4] for row in _merged(longest, 4)}
    assert got_longest.keys() == {k for k, v in want_longest.items() if v > 0}
    for key, value in want_longest.items():
        assert got_longest[key] == pytest.approx(value)
    assert pairs == pytest.approx(want_pairs)
    got_intra = {tuple(int(v) for v in row[:3]): row[3] for row in _merged(intra, 3)}
    merged = _merged(cross, 3)
    got_cross = {tuple(int(v) for v in row[:3]): row[3] for row in merged}
    assert got_intra.keys() == {k for k, v in want_intra.items() if v > 0}
    assert got_cross.keys() == {k for k, v in want_cross.items() if v > 0}
    for key, value in want_intra.items():
        assert got_intra[key] == pytest.approx(value)
    for key, value in want_cross.items():
        assert got_cross[key] == pytest.approx(value)
    # the next group's window: the share of the (pixel, tile) pairs but those whose reads all lie in
    # [t_first, t_last) (`_cross_windows`), and with t_first itself for the reach
    if not merged.shape[0]:
        return
    merged[:, 3] /= pairs
    rows = _cross_windows(merged, r * s, np.zeros(r * s, np.int64))
    want_rows = defaultdict(float)
    for (t_last, t_first, dm), v in want_cross.items():
        between = sum(w for (a, b, _dm), w in want_cross.items() if b >= t_first and a < t_last) / want_pairs
        before = sum(w for (a, b, _dm), w in want_cross.items() if b > t_first and a < t_last) / want_pairs
        want_rows[(r * s - t_last + t_first, dm, round(1.0 - between, 6), round(1.0 - before, 6))] += v / want_pairs
    got_rows = defaultdict(float)
    for d, dm, weight, window, reach, window_all in rows:
        assert window_all == pytest.approx(window)          # one class of sets: the L2's window is the L1's
        got_rows[(int(d), int(dm), round(window, 6), round(reach, 6))] += weight
    assert got_rows.keys() == want_rows.keys()
    for key, value in want_rows.items():
        assert got_rows[key] == pytest.approx(value)


@pytest.mark.parametrize("phase, want", [
    # one class of sets: the pair read at taps 0 and 2 is re-read past everything but the pixels read only at
    # tap 1 (in [0, 2)); the others are re-read past every pixel, alike (one row: d 3, dm 0)
    ([0, 0, 0], [[1, 5, 0.5, 0.75, 0.75, 0.75], [3, 0, 0.5, 1.0, 1.0, 1.0]]),
    # tap 1 in another class of sets: its pixels lie elsewhere, each re-read counts its own class only; the
    # L2's window (last column) counts every class: the re-reads of d 3 see every pixel
    ([0, 1, 0], [[1, 5, 0.5, 0.75, 0.75, 0.75], [3, 0, 0.25, 0.25, 0.25, 1.0], [3, 0, 0.25, 0.75, 0.75, 1.0]]),
])
def test_cross_windows_count_the_reread_pixels_class(phase, want):
    # (pixel, tile) pairs (last tap, first tap, rows on, weight): read at taps 0 and 2, only at 1, only at 2;
    # a pixel's taps share its class. Out: (d, dm, weight, window, reach, window in every set), rows alike
    # summed
    cross = np.array([[2, 0, 5, 0.5], [1, 1, 0, 0.25], [2, 2, 0, 0.25]], np.float64)
    rows = _cross_windows(cross, 3, np.array(phase, np.int64))
    assert rows == pytest.approx(np.array(want, np.float64))


def _pos(row, kernel):
    """A row's request index in its k-step (DESIGN section 3: warp 0's iterations j = 0.., then warp 1's),
    from the stripmined thread map's own formulas: thread t reads strided row t // T_c + j T_s."""
    t_c = kernel.tile_k // kernel.vector
    t_s = kernel.threads // t_c
    iters = kernel.tile_m // t_s
    first_thread = (row % t_s) * t_c
    return (first_thread // 32) * iters + row // t_s


@settings(max_examples=60, deadline=None)
@given(tk=st.sampled_from([8, 16, 32]), vector=st.sampled_from([1, 2, 4, 8]), threads=st.sampled_from([64, 128, 256]),
       tm=st.sampled_from([32, 64, 128, 256]), d=st.integers(1, 9), dm=st.integers(-300, 300),
       window=st.floats(10, 400), scale=st.floats(0.001, 0.02), others=st.floats(0, 3), b_lines=st.floats(0, 0.3))
def test_jittered_miss_averages_over_the_issue_order(tk, vector, threads, tm, d, dm, window, scale, others, b_lines):
    if tk % vector or (tk // vector) > 32 or threads % (tk // vector) or tm % (threads // (tk // vector)):
        return
    try:
        kernel = KernelConfig(tile_m=tm, tile_n=256, tile_k=tk, threads=threads, vector=vector, dtype="fp16")
    except ValueError:                     # a thread map that does not tile both operands
        return
    t_c = tk // vector
    t_s = threads // t_c
    req = threads // 32 * (tm // t_s)
    lo, hi = 0.95, 1.1
    want = 0.0
    base = 1000 * t_s                    # rows of one iteration's set, far from row 0 (pos is linear in j)
    for r in range(t_s):
        m0 = base + r
        f = max(0.0, 1.0 + (_pos(m0 + dm, kernel) - _pos(m0, kernel)) / (d * req))
        # this CTA's rows between the two reads move with their places; the SM's other CTAs read d k-steps
        x = scale * (min(500.0, 450.0, window * f) + others * min(500.0, window)) + b_lines
        want += (1.0 - _ramp(x, lo, hi)) / t_s
    got = _jittered_miss(window, 450.0, 500.0, scale, others, b_lines, d, dm, _issue_head(kernel), lo, hi)
    assert got == pytest.approx(want, abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(tiles=st.integers(1, 60), sms=st.integers(1, 8), cps=st.integers(1, 4))
def test_residency_classes_count_each_ctas_sm(tiles, sms, cps):
    counts = defaultdict(int)
    for wave in _dispatch(tiles, 1, 0, sms, cps):
        for slots in wave.values():
            if slots:
                counts[float(len(slots))] += len(slots)
    assert dict(residency_classes(tiles, sms, cps)) == pytest.approx({k: v / tiles for k, v in counts.items()})


@pytest.mark.parametrize("layer, kernel, gpu", [
    # seed 1 #128's shape, one image: dilated depthwise, one CTA an SM; the tile's taps, the issue order
    # and the filter lines of the rounds between (+55 % before them)
    (ConvLayer(1, 256, 50, 30, 256, 3, 3, pad=4, dilation=4, groups=256, name="dw_dil"),
     KernelConfig(tile_m=128, tile_n=256, tile_k=16, threads=128, ctas_per_sm=1),
     simcore.scale_gpu(simcore.gpu("titanxp"), {"l2_bytes": 0.25, "sms": 2})),
    # seed 3 #24's, one image: strided depthwise, four CTAs an SM, two of them on most SMs (-20 % before)
    (ConvLayer(1, 192, 45, 45, 192, 3, 3, stride=2, pad=1, groups=192, name="dw_s2"),
     KernelConfig(tile_m=128, tile_n=256, tile_k=8, threads=128, ctas_per_sm=4),
     simcore.scale_gpu(simcore.gpu("a100"), {"l2_slices": 0.5})),
])
def test_depthwise_l1_misses_against_simulation(layer, kernel, gpu):
    sim = traces.simulate_layer(layer, gpu, kernel)[Mx.L1_LD_MISSES + ":A"]
    pred = analytic.predict_layer(layer, gpu, kernel)[Mx.L1_LD_MISSES + ":A"]
    assert abs(pred / sim - 1.0) < 0.08


def test_previous_waves_filter_slice_is_found_in_the_l1():
    """Seed 3 #76's shape, fewer images: kSingleGroup 1x1 stride 2 on 32x32 tiles, 64 groups; a CTA's SM
    ran a CTA of its column in the previous wave, and one lifetime of the SM's lines (a few hundred)
    fits the L1: the slice is still there (85 % filter hits simulated, 67 % predicted without it)."""
    layer = ConvLayer(16, 768, 45, 45, 2048, 1, 1, stride=2, groups=64, name="g64_1x1")
    kernel = KernelConfig(tile_m=32, tile_n=32, tile_k=8, threads=256, swizzle_log=1, ctas_per_sm=2)
    gpu = simcore.scale_gpu(simcore.gpu("h100"), {"l2_slices": 2, "l1_smem_bytes": 2})
    sim = traces.simulate_layer(layer, gpu, kernel)
    pred = analytic.predict_layer(layer, gpu, kernel)
    hits, sectors = Mx.L1_LD_HITS + ":B", Mx.L1_LD_SECTORS + ":B"
    assert abs(pred[hits] - sim[hits]) / sim[sectors] < 0.03


def naive_row_of(row, intra, cross) -> int:
    """The row-by-row search: the intra row (kind 0: t, d, dm) or merged cross row (kind 1: d, dm, window, reach,
    window in every set) nearest a longest row."""
    if row[0] == 0.0:
        gap = np.abs(intra[:, :3] - row[1:4]).sum(axis=1)
    else:
        gap = np.abs(cross[:, [0, 1, 3, 4, 5]] - row[[2, 3, 5, 6, 7]]).sum(axis=1)
    return int(np.argmin(gap))


@pytest.mark.parametrize("net", ["mobilenet_v2", "resnext50_32x4d", "efficientnet_b0"])
def test_longest_rows_find_their_rows_as_the_row_by_row_search(net):
    from analytic._grouped_rereads import _reread_table
    layers = [x for x in traces.network(net, 2) if x.groups > 1]
    assert layers
    for layer in layers:
        intra, cross, longest = _reread_table(layer, KernelConfig(), 4, 128)
        assert longest[:, 8].tolist() == [naive_row_of(row, intra, cross) for row in longest], layer.name


@settings(max_examples=60, deadline=None)
@given(data=st.lists(st.tuples(*[st.sampled_from([0.0, 0.25, 0.5, 1.0, 3.0, 7.5])] * 5), min_size=0, max_size=40))
def test_unique_rows_is_numpys_unique_over_rows(data):
    rows = np.array(data, np.float64).reshape(-1, 5)
    keys, inverse = _unique_rows(rows)
    if rows.shape[0] == 0:
        assert keys.shape == (0, 5) and inverse.shape == (0,)
        return
    want_keys, want_inverse = np.unique(rows, axis=0, return_inverse=True)
    assert np.array_equal(keys, want_keys)
    assert np.array_equal(inverse, want_inverse.ravel())


def numpy_between(last, first, weight, rows, rs, q_last=None, q_first=None):
    """`_between` as numpy computed it before it was compiled: the joint table by np.add.at, the shares from two
    cumulative sums."""
    joint = np.zeros((rs + 1, rs + 1), np.float64)
    np.add.at(joint, (last[rows], first[rows]), weight[rows])
    below = np.zeros((rs + 1, rs + 2), np.float64)
    below[1:, :rs + 1] = np.cumsum(np.cumsum(joint[:rs, ::-1], axis=1)[:, ::-1], axis=0)
    share = joint.sum()
    if q_last is None:
        q_last, q_first = last[rows], first[rows]
    return (np.clip(share - below[q_last, q_first], 0.0, 1.0), np.clip(share - below[q_last, q_first + 1], 0.0, 1.0))


@settings(max_examples=60, deadline=None)
@given(rs=st.integers(1, 25), n=st.integers(1, 60), seed=st.integers(0, 2**31 - 1), own=st.booleans())
def test_between_matches_its_numpy_form(rs, n, seed, own):
    rng = np.random.default_rng(seed)
    last = rng.integers(0, rs, n)
    first = rng.integers(0, rs, n)
    weight = rng.random(n) / n
    rows = rng.random(n) < 0.7
    q = (None, None) if own else (rng.integers(0, rs, 9), rng.integers(0, rs, 9))
    got = _between(last, first, weight, rows, rs, *q)
    want = numpy_between(last, first, weight, rows, rs, *q)
    for g, w in zip(got, want):
        assert np.array_equal(g, w)
