"""Rows whose pixels are not whole sectors share a sector with their neighbour (`_window.row_run_sectors`):
the distinct sectors a row adds to a long run, against the sectors of a run enumerated byte by byte; and a
1x1 layer's A L1 misses, simulated, against each CTA's distinct sectors counted from its rows' bytes."""
import dataclasses

import pytest
from hypothesis import given, settings, strategies as st

import analytic
import simcore
import traces
from analytic._window import row_run_sectors

SEC = 32


def naive_run_sectors(pitch, C, tk, eb, rows=256):
    """Per row, the distinct sectors of ``rows`` consecutive rows' channel blocks, each block apart
    (a block's sectors are counted once however many rows read them), less a run's two ends."""
    total = 0
    for c0 in range(0, C, tk):
        width = min(tk, C - c0) * eb

        def distinct(n):
            return len({s for i in range(n) for s in range((i * pitch + c0 * eb) // SEC,
                                                             (i * pitch + c0 * eb + width - 1) // SEC + 1)})
        total += distinct(rows) - distinct(rows // 2)
    return total / (rows - rows // 2)


@given(st.integers(1, 80), st.sampled_from([8, 16, 32, 64]), st.sampled_from([2, 4]), st.integers(1, 4))
@settings(max_examples=80, deadline=None)
def test_row_run_sectors_is_a_long_runs_count(C, tk, eb, stride):
    pitch = stride * C * eb
    assert row_run_sectors(pitch, C, tk, eb, SEC) == pytest.approx(naive_run_sectors(pitch, C, tk, eb), abs=1e-9)


def test_row_run_sectors_by_hand():
    assert row_run_sectors(48, 24, 32, 2, SEC) == 1.5      # 48-byte pixels, one block: 3 sectors every 2 rows
    assert row_run_sectors(64, 32, 32, 2, SEC) == 2.0      # whole sectors: nothing shared
    assert row_run_sectors(96, 24, 32, 2, SEC) == 2.0      # stride 2: the neighbour's bytes are 48 away


def cta_distinct_sectors(layer, kernel):
    """Each CTA's distinct sectors of x (1x1, stride 1, one channel block: its rows' pixels are
    consecutive bytes), summed over the CTAs."""
    M, pixel = layer.n * layer.p * layer.q, layer.c * kernel.elem_bytes
    total = 0
    for m0 in range(0, M, kernel.tile_m):
        m1 = min(M, m0 + kernel.tile_m)
        total += (m1 * pixel - 1) // SEC - (m0 * pixel) // SEC + 1
    return total * -(-layer.k // kernel.tile_n)


@pytest.mark.parametrize("c, dtype", [(24, "fp16"), (40, "fp16"), (12, "fp32")])
def test_neighbour_rows_share_sectors_in_simulation(c, dtype):
    """1x1 nhwc, one row a warp request (T_k = 32 threads a row): each sector is fetched once per CTA."""
    gpu = dataclasses.replace(simcore.gpu("v100"), sms=4)
    layer = traces.ConvLayer(name="pw", n=2, c=c, h=24, w=24, k=32, r=1, s=1)
    kernel = traces.KernelConfig(tile_m=64, tile_n=32, tile_k=32, threads=128, layout="nhwc", dtype=dtype)
    key = "lts__t_sectors_srcunit_tex_op_read.sum:A"
    simulated = traces.simulate_layer(layer, gpu, kernel)[key]
    assert simulated == cta_distinct_sectors(layer, kernel)
    assert analytic.predict_layer(layer, gpu, kernel)[key] == pytest.approx(simulated, rel=0.02)


def naive_straddle_share(L, dm, tile_m):
    """Over a period of images (N L rows a multiple of tile_m), the share of pairs (m, m + dm) in one image
    that a tile boundary (a multiple of tile_m) separates."""
    from math import gcd
    N = tile_m // gcd(tile_m, L)
    pairs = cut = 0
    for n in range(N):
        for m in range(n * L, n * L + L - dm):
            pairs += 1
            cut += (m // tile_m) != ((m + dm) // tile_m)
    return cut / pairs


@given(st.integers(2, 120), st.integers(1, 119), st.sampled_from([16, 32, 48, 64, 128, 256]))
@settings(max_examples=80, deadline=None)
def test_straddle_share_counts_pairs_cut_by_tile_boundaries(L, dm, tile_m):
    from analytic._reuse import straddle_share
    if dm >= L or dm >= tile_m:
        return
    assert straddle_share(L, float(dm), tile_m) == pytest.approx(naive_straddle_share(L, dm, tile_m), abs=1e-9)


def test_tiles_of_whole_images_lose_no_tap_rereads():
    """A 7x1 filter on tiles that are whole 8x8 images: every tap's re-read stays in its CTA, so A's L1
    misses are each image's pixels once (the L1 holds an image)."""
    gpu = dataclasses.replace(simcore.gpu("h100"), sms=4)
    layer = traces.ConvLayer(name="col", n=6, c=32, h=8, w=8, k=32, r=7, s=1, pad=(3, 0))
    kernel = traces.KernelConfig(tile_m=64, tile_n=32, tile_k=32, threads=128, layout="nhwc")
    key = "lts__t_sectors_srcunit_tex_op_read.sum:A"
    simulated = traces.simulate_layer(layer, gpu, kernel)[key]
    assert simulated == 6 * 8 * 8 * 32 * 4 // SEC
    assert analytic.predict_layer(layer, gpu, kernel)[key] == pytest.approx(simulated, rel=0.02)
