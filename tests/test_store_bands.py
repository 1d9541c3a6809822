"""The stores of the grid's bands of tile_n columns (`analytic.model._band_stores`, `_row_lines`) and the
re-reads judged on them (`analytic._l2.banded_refetch_misses`), against line-by-line enumeration."""
import numpy as np
from hypothesis import given, settings, strategies as st

from analytic._l2 import NO_TABLE, banded_refetch_misses, cliff_params, refetch_misses
from analytic.factors import ReuseFactors
from analytic._stores import row_lines as _row_lines
from analytic.model import _band_stores
import simcore

NONE = np.zeros(0)      # no tiles a window holds twice (`analytic._wave_windows`)

LINE = 128


def _lines_touched(rows, first_byte, width, pitch):
    """Distinct lines of each row's [row * pitch + first_byte, + width), summed over rows (a line
    two rows share counts in each, as a CTA's stores touch it once a row)."""
    total = 0
    for r in range(rows):
        a = r * pitch + first_byte
        total += len({b // LINE for b in range(a, a + width)})
    return total


@settings(max_examples=60, deadline=None)
@given(eb=st.sampled_from([2, 4]), width=st.integers(1, 96), extra=st.integers(0, 96), offset=st.integers(0, 200))
def test_row_lines_is_the_mean_over_a_period(eb, width, extra, offset):
    pitch = (width + extra) * eb
    period = LINE // np.gcd(pitch, LINE)
    want = _lines_touched(period * 3, offset, width * eb, pitch) / (period * 3)
    assert abs(_row_lines(width * eb, pitch, offset, LINE) - want) < 1e-9


def _band_lines(rows, first_col, cols, tn, K, eb):
    """Lines one CTA of the columns [first_col, first_col + cols) touches, per column, enumerated."""
    lo, hi = first_col * tn, min(K, (first_col + cols) * tn)
    return _lines_touched(rows, lo * eb, (hi - lo) * eb, K * eb) / cols


@settings(max_examples=40, deadline=None)
@given(tn=st.sampled_from([32, 64, 128, 256]), cols=st.integers(2, 6), cut=st.integers(1, 255),
       eb=st.sampled_from([2, 4]), swz=st.integers(0, 2))
def test_band_stores_against_enumerated_columns(tn, cols, cut, eb, swz):
    cut = cut % tn or tn
    K = (cols - 1) * tn + cut                      # the last column is ``cut`` wide
    rows = 128                                     # a multiple of every row alignment period
    width = 1 << swz
    tiles_m = 10
    # one band a wave: each band's CTAs touch their own rows' lines
    full, df, share_a, share_b = _band_stores(0.0, float(tiles_m * width), tiles_m, cols, rows, tn, K, eb, swz,
                                              LINE, True)
    full_rows, rem = cols >> swz, cols - ((cols >> swz) << swz)
    nbands = full_rows + (rem > 0)
    if nbands < 2:
        assert (full, df, share_a, share_b) == (0.0, 0.0, 0.0, 0.0)
        return
    per_band = [_band_lines(rows, b * width, min(width, cols - b * width), tn, K, eb) for b in range(nbands)]
    ctas_wave = tiles_m * width
    assert abs(full - ctas_wave * np.mean(per_band[:-1])) < 1e-6
    assert abs(df - ctas_wave * (per_band[-1] - np.mean(per_band[:-1]))) < 1e-6
    ncols = rem if rem else width
    assert abs(share_a - 1.0 / (nbands - 1)) < 1e-12 and abs(share_b - ncols / cols) < 1e-12


def test_adjacent_bands_in_one_wave_share_their_lines():
    # K = 64 fp16 in 32-wide columns: a row's 128-byte line holds both columns' outputs. One band a wave:
    # each column's CTA touches the line (1 line a row); a wave spanning both bands touches it once
    rows, tiles_m = 128, 4
    alone = _band_stores(0.0, 1.0 * tiles_m, tiles_m, 2, rows, 32, 64, 2, 0, LINE, True)[0]
    shared = _band_stores(0.0, 2.0 * tiles_m, tiles_m, 2, rows, 32, 64, 2, 0, LINE, True)[0]
    assert alone == tiles_m * rows                 # a line a row, each CTA
    assert shared == 2 * tiles_m * rows / 2        # one line a row for the two CTAs of a row


def test_banded_refetch_reduces_to_refetch_and_lies_between():
    gpu = simcore.gpu("v100")
    cliff = cliff_params(gpu, ReuseFactors())
    cap = gpu.l2_bytes / LINE
    hist = np.zeros(8)
    hist[2], hist[3] = 5.0, 20.0
    f1, fnew = 0.35 * cap, 0.33 * cap
    base = refetch_misses(hist, 10.0, f1, fnew, cap, gpu.l2_ways, cliff, NONE, NO_TABLE)
    assert banded_refetch_misses(hist, 10.0, f1, fnew, 0.0, 0.5, True, cap, gpu.l2_ways, cliff, NONE, NO_TABLE) == base
    assert banded_refetch_misses(hist, 10.0, f1, fnew, -0.2 * cap, 0.0, True, cap, gpu.l2_ways, cliff, NONE, NO_TABLE) == base
    df = -0.3 * cap
    low = refetch_misses(hist, 10.0, f1 + df, fnew + df, cap, gpu.l2_ways, cliff, NONE, NO_TABLE)
    assert low < base                              # the cliff sits inside this range
    cross = banded_refetch_misses(hist, 10.0, f1, fnew, df, 1.0, True, cap, gpu.l2_ways, cliff, NONE, NO_TABLE)
    within = banded_refetch_misses(hist, 10.0, f1, fnew, df, 1.0, False, cap, gpu.l2_ways, cliff, NONE, NO_TABLE)
    assert low < cross < base
    assert abs(within - low) < 1e-9
    half = banded_refetch_misses(hist, 10.0, f1, fnew, df, 0.5, False, cap, gpu.l2_ways, cliff, NONE, NO_TABLE)
    assert abs(half - 0.5 * (base + low)) < 1e-9
