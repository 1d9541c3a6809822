"""A grouped layer's filter lines between two reads of a pixel (`analytic._grouped_filters`): the lines a
round of filter rows reads at the rows' own alignments to a line (`round_lines`), and the share of them in
the L1 set of a re-read pixel line (`in_set_ratio`). Checked against an enumeration of byte offsets, against
the generated request stream (every CTA's k-steps: the distinct filter lines, and the filter and pixel lines
per set), and against simulation."""
import collections

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

import analytic
import simcore
import traces
from analytic._grouped_filters import _row_lines, in_set_ratio, round_lines
from simcore import metrics as M
from traces.grouped import group_mode
from traces.stream import iter_request_chunks

LINE, SETS = 128, 4


@settings(max_examples=200, deadline=None)
@given(width=st.integers(1, 300), pitch=st.integers(1, 3000), tap=st.integers(1, 600), offset=st.integers(0, 600))
def test_row_lines_is_the_mean_over_rows_and_taps(width, pitch, tap, offset):
    # over whole periods (rows and taps 0 .. line - 1) every reachable alignment comes equally often
    lines = [(o % LINE + width - 1) // LINE + 1
             for k in range(LINE) for t in range(LINE) for o in (offset + k * pitch + t * tap,)]
    assert _row_lines(width, pitch, tap, offset, LINE) == pytest.approx(sum(lines) / len(lines), abs=1e-12)


def stream_rounds(layer, kernel, gpu):
    """(mean distinct filter lines a CTA reads in a k-step; mean over k-steps of a k-step's filter lines in a
    pixel line's set, its pixel lines weighted alike, over the mean of the filter lines a set), from the
    stream: every CTA's every k-step."""
    a, b = collections.defaultdict(set), collections.defaultdict(set)
    for chunk in iter_request_chunks(layer, gpu, kernel):
        for r in range(chunk.cta.shape[0]):
            if chunk.kind[r] == 1:                                  # stores
                continue
            key = (int(chunk.cta[r]), int(chunk.kstep[r]))
            lines = a if chunk.operand[r] == 0 else b
            for j in range(chunk.first[r], chunk.first[r] + chunk.count[r]):
                lines[key].add(int(chunk.sectors[j]) // LINE)
    keys = [k for k in b if k in a]
    in_set, per_set = [], []
    for k in keys:
        na = np.bincount([line % SETS for line in a[k]], minlength=SETS)
        nb = np.bincount([line % SETS for line in b[k]], minlength=SETS)
        in_set.append(float(na @ nb) / na.sum())
        per_set.append(nb.sum() / SETS)
    return float(np.mean([len(b[k]) for k in keys])), float(np.mean(in_set) / np.mean(per_set))


@pytest.mark.parametrize("layer, kernel, lines, ratio", [
    # seed 7 #47's shape: 896-byte filter rows, taps 128 bytes apart: one line a row and round
    (traces.ConvLayer(1, 64, 8, 8, 128, 1, 7, pad=(0, 3), groups=2),
     traces.KernelConfig(tile_m=64, tile_n=256, tile_k=32, threads=128), 64.0, 1.0),
    # seed 16 #279's: 4,608-byte filter rows, 1,024-byte pixels: a round's lines all in the pixels' set
    (traces.ConvLayer(1, 256, 8, 8, 384, 3, 3, pad=1, groups=2),
     traces.KernelConfig(tile_m=32, tile_n=32, tile_k=16, threads=128), 32.0, 4.0),
    # seed 5 #317's: 9,216-byte filter rows, 2,048-byte pixels
    (traces.ConvLayer(1, 512, 6, 6, 1024, 3, 3, pad=1, groups=2),
     traces.KernelConfig(tile_m=32, tile_n=256, tile_k=32, threads=128, vector=4), 256.0, 4.0),
    # 2-line pixels, 2-line filter taps: half the rounds' lines in the re-read's set pair
    (traces.ConvLayer(1, 256, 5, 5, 256, 1, 2, groups=2),
     traces.KernelConfig(tile_m=32, tile_n=32, tile_k=16, threads=128, dtype="fp16"), 32.0, 2.0),
])
def test_hand_made_rounds_match_the_stream(layer, kernel, lines, ratio):
    gpu = simcore.gpu("v100")
    assert round_lines(layer, kernel, LINE) == pytest.approx(lines)
    assert in_set_ratio(layer, kernel, SETS, LINE) == pytest.approx(ratio)
    assert stream_rounds(layer, kernel, gpu) == pytest.approx((lines, ratio), rel=1e-9)


@settings(max_examples=25, deadline=None)
@given(groups=st.sampled_from([2, 4, 8]), cg_lines=st.sampled_from([0.25, 0.5, 1, 2, 4]), kg=st.sampled_from([8, 16, 32]),
       r=st.integers(1, 3), s=st.integers(1, 3), dtype=st.sampled_from(["fp32", "fp16"]),
       tile_n=st.sampled_from([32, 64]), tile_k=st.sampled_from([8, 16, 32]), hw=st.integers(3, 6))
def test_rounds_match_the_stream(groups, cg_lines, kg, r, s, dtype, tile_n, tile_k, hw):
    eb = 4 if dtype == "fp32" else 2
    cg = int(cg_lines * LINE // eb)
    layer = traces.ConvLayer(1, groups * cg, hw, hw, groups * kg, r, s, pad=(r // 2, s // 2), groups=groups)
    try:
        kernel = traces.KernelConfig(tile_m=32, tile_n=tile_n, tile_k=tile_k, threads=128, dtype=dtype)
        mode = group_mode(layer, kernel)
    except ValueError:
        assume(False)
    # every CTA column full (no partial last column of fewer filters or groups)
    assume(layer.k % tile_n == 0 and (mode == "single" or groups % (tile_n // kg) == 0))
    got_lines, got_ratio = stream_rounds(layer, kernel, simcore.gpu("v100"))
    assert round_lines(layer, kernel, LINE) == pytest.approx(got_lines, rel=0.05)
    # the model takes the pixels' classes of sets as equal; an image of 3-6 pixels a side holds them unequally
    # (5 x 5 fp32 pixels of 2 lines: 13 in one class, 12 in the other, and the padded taps' rows fewer)
    assert in_set_ratio(layer, kernel, SETS, LINE) == pytest.approx(got_ratio, rel=0.12)


@pytest.mark.parametrize("layer, kernel, gpu, tol", [
    # seed 7 #47's shape, 4 images: the round's filter lines, half the mean over every alignment (+40.5 % before)
    (traces.ConvLayer(4, 64, 14, 14, 128, 1, 7, pad=(0, 3), groups=2),
     traces.KernelConfig(tile_m=64, tile_n=256, tile_k=32, threads=128),
     simcore.scale_gpu(simcore.gpu("h200"), {"l1_smem_bytes": 0.5}), 0.02),
    # seed 16 #279's: the filter and pixel lines of a round all in one set (-4.6 % before)
    (traces.ConvLayer(2, 256, 24, 24, 384, 3, 3, pad=1, groups=2),
     traces.KernelConfig(tile_m=32, tile_n=32, tile_k=16, threads=128, swizzle_log=2),
     simcore.scale_gpu(simcore.gpu("titanxp"), {"l2_bytes": 0.75}), 0.025),
    # held-out seed 33 #134's: 9,216-byte filter rows and 4,096-byte pixels, all of a round's lines in one set;
    # an SM's 8 CTAs (swizzle 3, slots 12 blocks apart) read 2 filter tiles, not 8 (+97 % counting 8)
    (traces.ConvLayer(1, 1024, 28, 28, 256, 3, 3, pad=1, groups=4),
     traces.KernelConfig(tile_m=32, tile_n=32, tile_k=8, threads=64, vector=4, swizzle_log=3),
     simcore.replace_gpu(simcore.gpu("h200"), sms=12, l2_slices=12), 0.02),
])
def test_filter_lines_match_simulation(layer, kernel, gpu, tol):
    sim = traces.simulate_layer(layer, gpu, kernel)[M.L2_RD_SECTORS]
    pred = analytic.predict_layer(layer, gpu, kernel)[M.L2_RD_SECTORS]
    assert abs(pred - sim) / sim < tol, (pred, sim)


def _valid_blocks(tiles_m, tiles_n, swz):
    """DESIGN section 3's CTA grid: linear block b -> (tile_m, tile_n), blocks outside the grid skipped."""
    out, b = [], 0
    width = 1 << swz
    while len(out) < tiles_m * tiles_n:
        bx, by = b % (tiles_m * width), b // (tiles_m * width)
        tm, tn = bx >> swz, (by << swz) + (bx & (width - 1))
        if tm < tiles_m and tn < tiles_n:
            out.append((tm, tn))
        b += 1
    return out


@settings(max_examples=120, deadline=None)
@given(tiles_m=st.integers(1, 40), tiles_n=st.integers(1, 12), swz=st.integers(0, 3), sms=st.integers(1, 40),
       slots=st.integers(1, 8))
def test_slot_columns_count_the_grids_columns(tiles_m, tiles_n, swz, sms, slots):
    """An SM's slot s holds valid block v + s sms; the distinct columns of its slots, over the sampled v."""
    from analytic._grouped_model import _slot_columns
    blocks = _valid_blocks(tiles_m, tiles_n, swz)
    ctas = len(blocks)
    span = max(1, ctas - (slots - 1) * sms)
    n = min(span, 64)
    want = sum(len({blocks[v + s * sms][1] for s in range(slots) if v + s * sms < ctas})
               for v in (i * span // n for i in range(n))) / n
    assert _slot_columns(tiles_m, tiles_n, swz, sms, slots, 64) == pytest.approx(want)


def test_filter_rereads_of_a_set_shared_with_the_pixels_match_simulation():
    """Held-out seed 22 #288's shape: 1x1, 4 groups of 64 fp32 channels; the filter rows (256 bytes: 2 lines)
    reach 2 sets, the pixels (1,024 bytes: 8 lines) one of them. An SM's 8 co-resident CTAs share a filter
    tile; a slot's re-read of a filter line hits where its set holds no pixel lines and misses beside the 64 of
    the round: half the filter lines. At the pixels' mean a set every re-read hit (filter hits +97 %, L2 reads
    -32 %)."""
    layer = traces.ConvLayer(2, 256, 40, 40, 1536, 1, 1, groups=4)
    kernel = traces.KernelConfig(tile_m=64, tile_n=128, tile_k=16, threads=64, swizzle_log=1)
    gpu = simcore.replace_gpu(simcore.gpu("h100"), sms=16, l2_slices=32)
    sim = traces.simulate_layer(layer, gpu, kernel)
    pred = analytic.predict_layer(layer, gpu, kernel)
    assert abs(pred[M.L2_RD_SECTORS] / sim[M.L2_RD_SECTORS] - 1.0) < 0.03
    b_hits = M.L1_LD_HITS + ":B"
    assert abs(pred[b_hits] / sim[b_hits] - 1.0) < 0.10
