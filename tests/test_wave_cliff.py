"""The L2 cliff of a window of whole waves: the re-read line's own place in its set (`_l2.l2_miss_prob`),
the dispersion of a strided filter's pixels (`_l2.blocks_dispersion`, `model._wave_cliff`), against the
naive L2's own mapping and a sweep through it; a wave's A lines, whose last tile_m is partial, and its
stores' lines (`_stores.wave_store_lines`) against enumerated bytes."""
import math

import pytest
from hypothesis import given, settings, strategies as st

import analytic
import analytic.model as model
import simcore
import traces
from analytic._l2 import OWN_PLACE, blocks_dispersion, hash_dispersion, l2_miss_prob
from analytic._memo import clear_memo
from analytic._stores import STORE_WAVES, wave_store_lines
from tests.naive_schedule import naive_valid_blocks
from tests.test_l2_dispersion import _sweep_miss, naive_dispersion
from tests.test_l2_pattern import blocks_lines


def naive_blocks_dispersion(slices, sets, ways, index, pitch, blocks):
    """`naive_dispersion` of the first slices*sets*ways distinct lines that pixels 0, 1, ... touch
    (``blocks`` of each, ``pitch`` bytes apart)."""
    return naive_dispersion(slices, sets, ways, index, blocks_lines(pitch, blocks, slices * sets * ways))


@given(st.sampled_from([12, 16, 20, 32, 40]), st.sampled_from([16, 32, 64]), st.integers(2, 8),
       st.sampled_from(["xor", "linear"]), st.sampled_from([128, 256, 384, 512, 1024]), st.integers(2, 4))
@settings(max_examples=40, deadline=None)
def test_blocks_dispersion_is_the_naive_mapping(slices, sets, ways, index, pixel, stride):
    blocks = ((0, pixel),)
    got = blocks_dispersion(slices, sets, ways, index, stride * pixel, blocks, 128)
    assert math.isclose(got, naive_blocks_dispersion(slices, sets, ways, index, stride * pixel, blocks),
                        rel_tol=1e-9, abs_tol=1e-12)


def test_contiguous_pixels_keep_the_hash_dispersion():
    # every pixel read (stride 1, or a 3-wide filter at stride 2 reaching the skipped ones)
    for g in ("a100", "h100", "v100"):
        gpu = simcore.gpu(g)
        geo = (gpu.l2_slices, gpu.l2_sets_per_slice, gpu.l2_ways, gpu.l2_index)
        d = hash_dispersion(*geo)
        assert blocks_dispersion(*geo, 1024, ((0, 1024),), 128) == d
        assert blocks_dispersion(*geo, 2048, ((0, 1024), (1024, 1024)), 128) == d
        # every other pixel of 1 KB: sets fill less evenly than contiguous lines
        assert blocks_dispersion(*geo, 2048, ((0, 1024),), 128) > d + 0.3


def test_own_place_puts_the_step_where_the_naive_sweep_has_it():
    # 16 slices (D = 0): every set holds its share of a sweep, the line itself one of them; the second
    # sweep hits at one L2 of lines and misses at one L2 plus a line a set, and the cliff (residual spread
    # small) steps between, not a line a set early
    assert OWN_PLACE == 1.0
    assert _sweep_miss(16, 16, 8, 1.0) == 0.0 and _sweep_miss(16, 16, 8, 1.0 + 1 / 8) == 1.0
    cliff = (0.05, 0.0)
    assert l2_miss_prob(1.0, 8.0, cliff) < 0.01
    assert l2_miss_prob(1.0 + 1 / 8, 8.0, cliff) > 0.99
    # lines dropped at random (spread 1): the line's own place is no help, P = P(Poisson(8 x) >= 8)
    poisson = 1.0 - sum(math.exp(-8.0) * 8.0 ** k / math.factorial(k) for k in range(8))
    assert l2_miss_prob(1.0, 8.0, (1.0, 0.0)) == pytest.approx(poisson, abs=0.05)


class _Win:
    """The fields of a GEMM window `_wave_cliff` reads."""

    def __init__(self, c, s, sw, dw):
        self.c, self.s, self.sw, self.dw = c, s, sw, dw


def test_wave_cliff_mixes_the_strided_pixels_dispersion():
    gpu = simcore.gpu("a100")
    geo = (gpu.l2_slices, gpu.l2_sets_per_slice, gpu.l2_ways, gpu.l2_index)
    cliff = (0.5, hash_dispersion(*geo))
    d_pix = blocks_dispersion(*geo, 2048, ((0, 1024),), 128)
    got = model._wave_cliff(gpu, cliff, _Win(256, 1, 2, 1), 4, 128, True, 0.25)
    assert got == pytest.approx((0.5, 0.25 * d_pix + 0.75 * cliff[1]))
    # stride 1, a filter that reaches the skipped pixels, nchw, or no A lines: the GPU's own cliff
    assert model._wave_cliff(gpu, cliff, _Win(256, 1, 1, 1), 4, 128, True, 0.25) == cliff
    assert model._wave_cliff(gpu, cliff, _Win(256, 3, 2, 1), 4, 128, True, 0.25) == cliff
    assert model._wave_cliff(gpu, cliff, _Win(256, 1, 2, 1), 4, 128, False, 0.25) == cliff
    assert model._wave_cliff(gpu, cliff, _Win(256, 1, 2, 1), 4, 128, True, 0.0) == cliff
    # dilation 2 at stride 2: a 3-wide filter reads pixels 0 and 2 of each window, never the odd ones
    got = model._wave_cliff(gpu, cliff, _Win(256, 3, 2, 2), 4, 128, True, 1.0)
    assert got == pytest.approx((0.5, d_pix))


def test_a_wave_loads_the_partial_tile_rows_only(monkeypatch):
    # a 1x1 layer of M = 2 x 23 x 23 = 1058 rows in 256-row tiles (4 full, one of 34 rows) on one wave's
    # worth of SMs: every wave reads every tile_m once, so its A lines are the layer's, 1058 rows of 16 lines
    # (1024 fp16 channels), not five full tiles' 1280 rows
    layer = traces.ConvLayer(n=2, c=1024, h=23, w=23, k=768, r=1, s=1, name="p")
    kernel = traces.KernelConfig(tile_m=256, tile_n=32, tile_k=32, threads=256, dtype="fp16")
    gpu = simcore.gpu("p100")
    seen = []
    real = model._wave_loads

    def spy(dens_l, tm, delta, b_slice_lines, na, nb, runs):
        seen.append((dens_l * (na * tm + runs * delta), na))
        return real(dens_l, tm, delta, b_slice_lines, na, nb, runs)

    monkeypatch.setattr(model, "_wave_loads", spy)
    clear_memo()                          # whole predictions are memoized: this one must run the engine
    analytic.predict_layer(layer, gpu, kernel)
    full = [a for a, na in seen if na == 5]
    assert full and all(a == pytest.approx(1058 * 16) for a in full)


def naive_wave_store_lines(tiles_m, tiles_n, swz, per_wave, M, tm, tn, K, eb, line=128):
    """Distinct lines the CTAs of each full wave store (rows of K·eb bytes, a CTA its tile's rows x its
    column's channels), by enumerating their bytes' lines; the mean over the full waves."""
    blocks = naive_valid_blocks(tiles_m, tiles_n, swz)
    n_full = len(blocks) // per_wave
    total = 0
    for w in range(n_full):
        lines = set()
        for i, j in blocks[w * per_wave:(w + 1) * per_wave]:
            a, b = j * tn, min(K, (j + 1) * tn)
            for m in range(i * tm, min(M, (i + 1) * tm)):
                lines.update(range((m * K + a) * eb // line, ((m * K + b) * eb - 1) // line + 1))
        total += len(lines)
    return total / n_full


@given(st.integers(1, 12), st.integers(1, 9), st.integers(0, 2), st.integers(2, 40),
       st.sampled_from([16, 32, 64]), st.sampled_from([8, 16, 32, 64]), st.integers(3, 200),
       st.sampled_from([2, 4]), st.integers(1, 64))
@settings(max_examples=80, deadline=None)
def test_wave_store_lines_counts_each_waves_lines(tiles_m, tiles_n, swz, per_wave, tm, tn, K, eb, last):
    tiles_n = min(tiles_n, -(-K // tn))
    M = (tiles_m - 1) * tm + min(last, tm)
    if tiles_m * tiles_n < per_wave:
        assert wave_store_lines(tiles_m, tiles_n, swz, per_wave, M, tm, tn, K, eb, 128) == 0.0
        return
    if tiles_m * tiles_n // per_wave > STORE_WAVES:
        return
    got = wave_store_lines(tiles_m, tiles_n, swz, per_wave, M, tm, tn, K, eb, 128)
    assert got == pytest.approx(naive_wave_store_lines(tiles_m, tiles_n, swz, per_wave, M, tm, tn, K, eb))


def test_a_wave_across_columns_that_share_no_line():
    # seed 13 #10's grid: 36 tiles of 256 rows, 6 columns of 32 fp16 channels (64 bytes: columns 0-1,
    # 2-3, 4-5 share each row's line), 56 CTAs a wave down the columns. Wave 1 holds column 1's last 16
    # tiles and column 2's 36 and column 3's first 4: 52 CTAs' rows of lines, 13,312
    want = naive_wave_store_lines(36, 6, 0, 56, 9216, 256, 32, 192, 2)
    got = wave_store_lines(36, 6, 0, 56, 9216, 256, 32, 192, 2, 128)
    assert got == pytest.approx(want)
    blocks = naive_valid_blocks(36, 6, 0)[56:112]
    assert {j for _i, j in blocks} == {1, 2, 3}
    assert naive_wave_store_lines(36, 2, 0, 56, 9216, 256, 32, 192, 2) == 36 * 256   # one line a row


def test_bands_a_wave_spans_take_its_counted_stores():
    # 56 CTAs a wave over 36-tile columns (1.6 bands of one column): the stores beyond the layer's mean a
    # CTA are the counted waves', and no last band is told apart; one band a wave keeps the bands' count
    from analytic.model import _band_stores
    M, tm, tn, K, eb = 9216, 256, 32, 192, 2
    c_lines = M * K * eb / 128 / (36 * 6)
    want = naive_wave_store_lines(36, 6, 0, 56, M, tm, tn, K, eb) / 56
    full, df, share_a, _share_b = _band_stores(c_lines, 54.0, 36, 6, M / 36, tn, K, eb, 0, 128, True, (56, M, tm))
    assert full == pytest.approx(54.0 * (want - c_lines)) and df == 0.0 and share_a == pytest.approx(1 / 5)
    assert want > 1.3 * c_lines
    one_band = _band_stores(c_lines, 36.0, 36, 6, M / 36, tn, K, eb, 0, 128, True, (36, M, tm))
    assert one_band == _band_stores(c_lines, 36.0, 36, 6, M / 36, tn, K, eb, 0, 128, True)
