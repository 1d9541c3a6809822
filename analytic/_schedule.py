"""Schedule statistics of the CTA grid (Numba): who shares tiles with whom, on an SM and in a wave.

DESIGN section 3's dispatcher hands out the grid's *valid* blocks (those whose tile lies in the grid)
in linear-id order; with every CTA taking the same number of steps, waves run in lockstep and wave w
is valid blocks [w B, (w + 1) B) (B = SMs x CTAs per SM), valid block j of a wave sitting on SM
j mod SMs in slot j // SMs. So every statistic below is a function of the valid-block sequence.

The valid-block sequence (GemmIdentityThreadblockSwizzle with log width L): grid rows of
G = tiles_m 2^L blocks; a full row r holds, at row position x, tile_m = x >> L and
tile_n = (r << L) + (x & (2^L - 1)); there are tiles_n >> L full rows. When tiles_n is not a multiple
of 2^L, a last row keeps only the rem = tiles_n mod 2^L lanes: position x holds tile_m = x // rem,
tile_n = (full rows << L) + x mod rem. In both, a row is tiles_m *runs* of l consecutive blocks
(l = 2^L or rem) of one tile_m, and lane x mod l selects the tile_n.

Exact statistics would loop over all CTAs, whose number grows with the batch. Instead the sampled
statistics below average over at most ``max_samples`` (wave, SM) pairs of the full waves (or
waves), chosen by a low-discrepancy sequence, plus every SM of the last wave (exact when there are
fewer pairs than that), so the cost is bounded whatever the batch size.
"""
from __future__ import annotations

import functools
import math

import numpy as np
from simcore._jit import njit

from ._dgrad_places import _extra_windows, _in_step, a_key, b_key, window_layers
from ._memo import memo

# Numba's on-disk cache checks only this file's own time stamp: this digest of the kernel module it calls
# into (`_dgrad_places`; tests/test_jit_deps.py) changes this file with it
_JIT_DEPS_SHA256 = "0718c3953d93e3f1"

_PHI = (math.sqrt(5.0) - 1.0) / 2.0      # low-discrepancy (golden ratio) sample positions


@njit(cache=True, inline="always")
def sample_index(i, take, n):
    """The i-th of ``take`` samples of 0 .. n - 1: all of them in order when take == n, else the
    golden-ratio sequence's i-th position."""
    if take == n:
        return i
    return int(((i + 0.5) * _PHI % 1.0) * n)


@njit(cache=True, inline="always")
def tile_of(v, tiles_m, tiles_n, swz):
    """(tile_m, tile_n) of valid block v (0 <= v < tiles_m tiles_n)."""
    width = 1 << swz
    g = tiles_m * width
    full_rows = tiles_n >> swz
    r = v // g
    if r < full_rows:
        x = v - r * g
        return x >> swz, (r << swz) + (x & (width - 1))
    rem = tiles_n - (full_rows << swz)
    x = v - full_rows * g
    return x // rem, (full_rows << swz) + x % rem


@njit(cache=True)
def grid_tiles(tiles_m, tiles_n, swz):
    """(tile_m, tile_n) of every valid block, in block order (`tile_of`): two arrays."""
    cm = np.empty(tiles_m * tiles_n, np.int64)
    cn = np.empty(tiles_m * tiles_n, np.int64)
    for v in range(tiles_m * tiles_n):
        cm[v], cn[v] = tile_of(v, tiles_m, tiles_n, swz)
    return cm, cn


@njit(cache=True)
def column_ranges(first, count, tiles_m, tiles_n, swz):
    """(lo, hi) per tile_m: the lowest and highest tile_n among valid blocks first .. first + count - 1
    (`tile_of`; -1 / tiles_n where the range holds none of the tile's blocks). A tile's blocks come in
    ascending tile_n, so the range holds every column between."""
    lo = np.full(tiles_m, tiles_n, np.int64)
    hi = np.full(tiles_m, -1, np.int64)
    for v in range(first, first + count):
        t, n = tile_of(v, tiles_m, tiles_n, swz)
        lo[t] = min(lo[t], n)
        hi[t] = max(hi[t], n)
    return lo, hi


# columns of sm_configs' rows
(CFG_WEIGHT, CFG_K, CFG_NA, CFG_NB, CFG_AREP, CFG_BREP, CFG_PREV, CFG_PREV_A, CFG_PREV_B, CFG_GAPA,
 CFG_GAPB, CFG_PREV_NA, CFG_PREV_NB, CFG_ASHARE, CFG_BACK_A, CFG_NA_EXTRA, CFG_COVER_A, CFG_COVER_S,
 CFG_COVER_MORE, CFG_BACK_MORE, CFG_BREP_SHARE, CFG_SUB, CFG_BACK_B) = range(23)
_CFG_COLS = 23
# waves back that a CTA's tile_m (CFG_BACK_A) and tile_n (CFG_BACK_B) are looked for on its SM
BACK_WAVES = 4
# waves back that strided dgrad's earlier CTAs on the SM are followed (`_strided_covers`): 64 #80 (a sub-problem
# every 1.4 waves, an L1 that keeps all) fetches 14 % more than it does over 4, exactly it over 8 (scratch count)
STRIDED_BACK = 8


@njit(cache=True, inline="always")
def _eighths(x):
    """``x`` (a share) in eighths: configurations merge on it (`_config_key`)."""
    return math.floor(8.0 * x + 0.5) / 8.0


@njit(cache=True)
def _strided_covers(w, sm, s, per_wave, sms, cps, tiles_m, tiles_n, swz, tm_, m_div, apq, slot_tm, both, labels,
                    layers):
    """Strided dgrad: how much of slot s's dy window its SM read before (`_dgrad_places.window_layers`: tiles of any
    place and sub-problem, by how far back). Returns (the share its earlier slots read; the nearest earlier wave,
    1 .. STRIDED_BACK, whose CTAs read some of the rest, 0 if none; the share of the rest they read, in eighths;
    the share of the rest the waves before that read too, in eighths, and their distance in waves, weighted by
    it). Each new sub-problem's tile finds the union of the earlier ones' at its place: 64 #80 (5x5 stride 4,
    a sub-problem every 1.4 waves on an SM, an L1 that holds all) fetches exactly the union, 5,262 .. 5,382
    sectors an SM over its 176 CTAs. A wave's share under a sixteenth joins the next wave's."""
    n = 0
    for i in range(s):
        both[n] = tm_[i]
        labels[n] = 0
        n += 1
    back = min(w, STRIDED_BACK)
    for g in range(1, back + 1):
        gbase = (w - g) * per_wave + sm
        for s2 in range(cps):
            if g == 1:
                both[n] = tm_[cps + s2]
            elif slot_tm is not None:
                both[n] = slot_tm[gbase + s2 * sms]
            else:
                both[n], _gtn = tile_of(gbase + s2 * sms, tiles_m, tiles_n, swz)
            labels[n] = g
            n += 1
    window_layers(apq, m_div, tm_[s], both, labels, n, layers)
    cov_s = layers[0]
    first_g = 0
    cover = 0.0
    more = 0.0
    dist = 0.0
    carry = 0.0
    if cov_s < 1.0:
        for g in range(1, back + 1):
            carry += layers[g] / (1.0 - cov_s)
            if carry < 1.0 / 16.0:
                continue
            if first_g == 0:
                first_g = g
                cover = carry
            else:
                more += carry
                dist += carry * g
            carry = 0.0
    return cov_s, first_g, _eighths(cover), _eighths(more), math.floor(dist / more + 0.5) if more > 0.0 else 0.0


@njit(cache=True)
def _sm_slots(w, sm, ctas, per_wave, sms, cps, tiles_m, tiles_n, swz, tm_, tn_, cfg, m_div, bcls, ashift, apq, work,
              slot_tm=None, slot_tn=None, slot_start=None, slot_end=None, overlap=None):
    """The CTAs of SM ``sm`` in wave ``w``: their number k, and in ``cfg[s]`` slot s's columns
    CFG_K .. CFG_GAPB (CFG_WEIGHT left alone). ``tm_`` / ``tn_`` (2 cps long: this wave's slots, then the
    previous wave's) hold their tile_m and B keys (`b_key`); distinct A windows are counted by `a_key`.
    ``slot_tm`` / ``slot_tn`` (strided dgrad, `_dispatch.sm_tables`): the loading CTAs at each position of the
    dispatcher's waves, -1 where an SM's wave holds fewer, this wave's and the earlier ones'; ``slot_start`` /
    ``slot_end`` their rounds (an earlier slot is in step only if it still runs when this one starts);
    ``overlap``: `_geometry.dgrad_step_overlap` for CFG_BREP_SHARE. ``work``: scratch arrays (`_work`)."""
    base = w * per_wave + sm
    k = 0
    # scratch (`_work`): start and end rounds of the slots (a dispatch table's; else in step), and
    # `_strided_covers`' tiles, labels and layers
    st_, end_, both, labels, layers = work
    st_[:] = 0
    end_[:] = 1
    for s in range(cps):
        v = base + s * sms
        if v >= ctas:
            break
        if slot_tm is not None:
            if slot_tm[v] < 0:
                continue
            tm_[k], tn_[k] = slot_tm[v], slot_tn[v]
            if slot_start is not None:
                st_[k], end_[k] = slot_start[v], slot_end[v]
        else:
            tm_[k], tn_[k] = tile_of(v, tiles_m, tiles_n, swz)
        tn_[k] = b_key(tm_[k], tn_[k], m_div, bcls)
        k += 1
    if k == 0:
        return 0
    na = 0
    nb = 0
    for s in range(k):
        new_a = True
        new_b = True
        for s2 in range(s):
            if a_key(tm_[s2], m_div, bcls) == a_key(tm_[s], m_div, bcls):
                new_a = False
            if tn_[s2] == tn_[s]:
                new_b = False
        na += new_a
        nb += new_b
    # the previous wave's CTAs on this SM (all of its slots were filled: waves before the last are full),
    # in tm_ / tn_[cps:], and their distinct tiles
    prev = w > 0
    pna = 0
    pnb = 0
    if prev:
        pbase = (w - 1) * per_wave + sm
        for s2 in range(cps):
            if slot_tm is not None:
                ptm, ptn = slot_tm[pbase + s2 * sms], slot_tn[pbase + s2 * sms]
                if ptm < 0:
                    tm_[cps + s2], tn_[cps + s2] = -1, -1
                    continue
            else:
                ptm, ptn = tile_of(pbase + s2 * sms, tiles_m, tiles_n, swz)
            tm_[cps + s2], tn_[cps + s2] = ptm, b_key(ptm, ptn, m_div, bcls)
            new_a = True
            new_b = True
            for s3 in range(s2):
                if tm_[cps + s3] < 0:
                    continue
                if a_key(tm_[cps + s3], m_div, bcls) == a_key(ptm, m_div, bcls):
                    new_a = False
                if tn_[cps + s3] == tn_[cps + s2]:
                    new_b = False
            pna += new_a
            pnb += new_b
    for s in range(k):
        arep = 0.0
        brep = 0.0
        bshare = 1.0
        gapa = 0.0
        gapb = 0.0
        ashare = 0.0
        for s2 in range(s):
            # an earlier slot reads what this one reads at about the same round where it still runs when this
            # one starts (a dispatch table's CTAs of one wave may run one after the other: seed 32 #46, 1x1 stride
            # 2, a loading CTA of 13 rounds beside store-only ones of one, then one of its own tile in another
            # column once it ended: their reads met as in step, A L2 reads -15 %, and simulated none hits; seed
            # 1 #60, the same 3 rounds late while the first runs, all hit)
            together = st_[s] < end_[s2] and st_[s2] < end_[s]
            if tm_[s2] == tm_[s] and together:
                arep = 1.0
                gapa = s - s2
            elif a_key(tm_[s2], m_div, bcls) == a_key(tm_[s], m_div, bcls):
                ashare = 1.0
                if ashift is not None and arep == 0.0 and together and _in_step(ashift, apq, tm_[s2] // m_div,
                                                                                tm_[s] // m_div, tm_[s] % m_div):
                    # another sub-problem whose taps read this tile's dy lines at every k-step: what
                    # it has just read (seed 1 #292: such CTAs hit 100 % simulated)
                    arep = 1.0
                    gapa = s - s2
            if tn_[s2] == tn_[s]:
                brep = 1.0
                gapb = s - s2
                # strided dgrad: the share of this CTA's filter sectors that slot's sub-problem reads at the same
                # k-step (`_geometry.dgrad_step_overlap`), for this CTA's own pair: each group of sub-problems is
                # predicted on its own rows, which a whole grid's mean (the former `brep_overlap`) mixed
                bshare = overlap[tm_[s] // m_div, tm_[s2] // m_div] if overlap is not None else 1.0
        pa = 0.0
        pb = 0.0
        back = 0.0
        cover = 0.0
        if prev:
            for s2 in range(cps, 2 * cps):
                if tn_[s2] == tn_[s]:
                    pb = 1.0
                if apq is None and tm_[s2] == tm_[s]:
                    pa = 1.0
                    cover = 1.0
        backb = 0.0
        if apq is None and (pa == 0.0 or pb == 0.0):
            # the nearest earlier wave (2 .. BACK_WAVES back) whose CTA on this SM had this tile_m, and the one
            # with this tile_n (67 #52: 198 SMs, one CTA each, four columns a band: an SM's column alternates
            # wave by wave, and its filter slice of two waves back is in the L1, B hits 96 % simulated)
            for g in range(2, BACK_WAVES + 1):
                if w - g < 0 or ((back > 0.0 or pa > 0.0) and (backb > 0.0 or pb > 0.0)):
                    break
                gbase = (w - g) * per_wave + sm
                for s2 in range(cps):
                    gtm, gtn = tile_of(gbase + s2 * sms, tiles_m, tiles_n, swz)
                    if pa == 0.0 and back == 0.0 and gtm == tm_[s]:
                        back = float(g)
                        cover = 1.0
                    if pb == 0.0 and backb == 0.0 and gtn == tn_[s]:
                        backb = float(g)
        cov_s = 0.0
        more = 0.0
        back2 = 0.0
        if apq is not None:
            cov_s, first_g, cover, more, back2 = _strided_covers(w, sm, s, per_wave, sms, cps, tiles_m, tiles_n, swz,
                                                                 tm_, m_div, apq, slot_tm, both, labels, layers)
            pa = 1.0 if first_g == 1 else 0.0
            back = float(first_g) if first_g >= 2 else 0.0
        cfg[s, CFG_K] = k
        cfg[s, CFG_NA] = na
        cfg[s, CFG_NB] = nb
        cfg[s, CFG_AREP] = arep
        cfg[s, CFG_BREP] = brep
        cfg[s, CFG_PREV] = 1.0 if prev else 0.0
        cfg[s, CFG_PREV_A] = pa
        cfg[s, CFG_PREV_B] = pb
        cfg[s, CFG_GAPA] = gapa
        cfg[s, CFG_GAPB] = gapb
        cfg[s, CFG_PREV_NA] = pna
        cfg[s, CFG_PREV_NB] = pnb
        cfg[s, CFG_ASHARE] = ashare
        cfg[s, CFG_BACK_A] = back
        cfg[s, CFG_BACK_B] = backb
        cfg[s, CFG_COVER_A] = cover
        cfg[s, CFG_COVER_S] = _eighths(cov_s)
        cfg[s, CFG_COVER_MORE] = more
        cfg[s, CFG_BACK_MORE] = back2
        cfg[s, CFG_BREP_SHARE] = _eighths(bshare) if brep > 0.0 else 1.0
        cfg[s, CFG_SUB] = tm_[s] // m_div if bcls is not None else 0
    return k


@njit(cache=True)
def _work(cps):
    """`_sm_slots`' scratch arrays, allocated once a summary (five arrays a call cost 5 % of fprop's predictions,
    measured)."""
    return (np.zeros(cps, np.int64), np.ones(cps, np.int64), np.empty((STRIDED_BACK + 1) * cps, np.int64),
            np.empty((STRIDED_BACK + 1) * cps, np.int64), np.empty(STRIDED_BACK + 1, np.float64))


@njit(cache=True)
def _sample_pairs(ctas, sms, cps, max_samples):
    """The sampled (wave, SM) pairs: ``max_samples`` of the full waves' (at the golden-ratio
    sequence, or all of them) with their weight, then every SM of the last, partial wave (weight 1).
    Rows (wave, SM, weight). The full waves get their own budget: when it was what the last wave's
    SMs left of one budget, 132 SMs (h100) left one sample, of a later wave, so no first-wave CTA (no
    previous occupant: cold misses) was ever seen."""
    per_wave = sms * cps
    full = ctas // per_wave
    n_full_pairs = full * sms
    n_last_sms = min(sms, ctas - full * per_wave)
    take_full = min(n_full_pairs, max_samples)
    out = np.empty((take_full + n_last_sms, 3), np.float64)
    wgt = n_full_pairs / take_full if take_full else 0.0
    for i in range(take_full):
        j = sample_index(i, take_full, n_full_pairs)
        out[i, 0] = j // sms
        out[i, 1] = j % sms
        out[i, 2] = wgt
    for sm in range(n_last_sms):
        out[take_full + sm, 0] = full
        out[take_full + sm, 1] = sm
        out[take_full + sm, 2] = 1.0
    return out


@njit(cache=True)
def _table_pairs(waves, sms, max_samples, later):
    """The sampled (wave, SM) pairs of a dispatch table (`_dispatch.sm_tables`) of ``waves`` waves: every SM
    of the first wave (weight 1), then ``max_samples`` of the later waves' pairs (the golden-ratio sequence,
    or all of them), each CTA standing for ``later`` of the grid's. Rows (wave, SM, weight)."""
    n_later = (waves - 1) * sms
    take = min(n_later, max_samples)
    out = np.empty((sms + take, 3), np.float64)
    for sm in range(sms):
        out[sm, 0] = 0
        out[sm, 1] = sm
        out[sm, 2] = 1.0
    wgt = later * n_later / take if take else 0.0
    for i in range(take):
        j = sample_index(i, take, n_later)
        out[sms + i, 0] = 1 + j // sms
        out[sms + i, 1] = j % sms
        out[sms + i, 2] = wgt
    return out


@njit(cache=True)
def sm_configs(tiles_m, tiles_n, swz, sms, cps, max_samples, m_div=0, bcls=None, ashift=None, apq=None):
    """Co-residency configurations, one row per sampled CTA (columns CFG_*), weights summing to the
    number of CTAs: k CTAs on its SM, na / nb distinct tile_m / tile_n among them, whether an earlier
    slot of the SM holds the same tile_m (AREP) / tile_n (BREP), whether the SM ran CTAs in the previous
    wave (PREV) and whether one of them had the same tile_m (PREV_A) / tile_n (PREV_B), and the slot
    distance to the nearest earlier slot with the same tile_m (GAPA) / tile_n (GAPB), 0 if none, and
    the previous wave's distinct tile_m / tile_n on the SM (PREV_NA / PREV_NB, 0 without one), and
    whether an earlier slot holds another tile of the same A window (`a_key`: strided dgrad's sub-problems,
    ASHARE); NA_EXTRA 0 (`sm_config_summary` splits a row by it). COVER_A: the share of the tile's A window the
    earlier wave of PREV_A / BACK_A read (1: the same tile); strided dgrad (``apq``) also COVER_S, COVER_MORE and
    BACK_MORE (`_strided_covers`: the shares its earlier slots and farther waves read) and SUB (its
    sub-problem), else 0."""
    ctas = tiles_m * tiles_n
    per_wave = sms * cps
    pairs = _sample_pairs(ctas, sms, cps, max_samples)
    out = np.zeros((pairs.shape[0] * cps, _CFG_COLS), np.float64)
    tm_ = np.empty(2 * cps, np.int64)
    tn_ = np.empty(2 * cps, np.int64)
    work = _work(cps)
    row = 0
    for i in range(pairs.shape[0]):
        k = _sm_slots(int(pairs[i, 0]), int(pairs[i, 1]), ctas, per_wave, sms, cps, tiles_m, tiles_n, swz,
                      tm_, tn_, out[row:], m_div, bcls, ashift, apq, work)
        for s in range(k):
            out[row + s, CFG_WEIGHT] = pairs[i, 2]
        row += k
    return out[:row]


@njit(cache=True, inline="always")
def _config_key(cfg, s, base):
    """Two integers naming slot s's columns 1.. of ``cfg`` but CFG_SUB: its counts (below ``base``) and flags, then
    its shares in eighths (one integer overflowed at 32 CTAs an SM)."""
    key = 0
    for c in (CFG_K, CFG_NA, CFG_NB, CFG_GAPA, CFG_GAPB, CFG_PREV_NA, CFG_PREV_NB, CFG_BACK_A, CFG_BACK_B):
        key = key * base + int(cfg[s, c])
    for c in (CFG_AREP, CFG_BREP, CFG_PREV, CFG_PREV_A, CFG_PREV_B, CFG_ASHARE):
        key = key * 2 + int(cfg[s, c])
    key2 = int(4.0 * cfg[s, CFG_NA_EXTRA] + 0.5)
    for c in (CFG_COVER_A, CFG_COVER_S, CFG_COVER_MORE, CFG_BREP_SHARE):
        key2 = key2 * 9 + int(8.0 * cfg[s, c] + 0.5)
    key2 = key2 * (STRIDED_BACK + 1) + int(cfg[s, CFG_BACK_MORE])
    return key, key2


@njit(cache=True)
def sm_config_summary(tiles_m, tiles_n, swz, sms, cps, max_samples, m_div=0, bcls=None, ashift=None, apq=None,
                      slot_tm=None, slot_tn=None, later=1.0, slot_start=None, slot_end=None, overlap=None):
    """The rows of `sm_configs` merged where columns 1.. are equal (weights summed, in order of first
    appearance), as the samples are drawn: each configuration keyed by one integer (its small counts
    and flags), no array of every sampled CTA (h100, 196 x 4 tiles, 2 CTAs per SM: 35 us before, 12 us;
    measured). With ``ashift`` and ``apq`` (strided dgrad, `row_shifts`, `_tile_start`) a sample's rows
    are split by the A windows its SM's out-of-step tiles of one place add (NA_EXTRA, `_extra_windows`),
    weighted by their share of k-steps. ``slot_tm`` / ``slot_tn`` (strided dgrad, `_dispatch.sm_tables`): the
    tiles at each position of the dispatcher's waves, -1 where an SM's wave holds fewer; each CTA past the
    first wave stands for ``later`` of the grid's (`_table_pairs`); ``slot_start`` / ``slot_end``: the rounds
    each starts and ends; ``overlap`` (strided dgrad, `_geometry.dgrad_step_overlap`): a BREP row's share of
    filter sectors, CFG_BREP_SHARE."""
    ctas = tiles_m * tiles_n if slot_tm is None else slot_tm.shape[0]
    per_wave = sms * cps
    if slot_tm is None:
        pairs = _sample_pairs(ctas, sms, cps, max_samples)
    else:
        pairs = _table_pairs(ctas // per_wave, sms, max_samples, later)
    cfg = np.zeros((cps, _CFG_COLS), np.float64)
    tm_ = np.empty(2 * cps, np.int64)
    tn_ = np.empty(2 * cps, np.int64)
    work = _work(cps)
    out = np.zeros((16, _CFG_COLS), np.float64)
    keys = np.empty((16, 2), np.int64)
    m = 0
    base = max(cps, BACK_WAVES, STRIDED_BACK) + 1
    hist = np.zeros(4 * cps + 1, np.float64)
    for i in range(pairs.shape[0]):
        k = _sm_slots(int(pairs[i, 0]), int(pairs[i, 1]), ctas, per_wave, sms, cps, tiles_m, tiles_n, swz,
                      tm_, tn_, cfg, m_div, bcls, ashift, apq, work, slot_tm, slot_tn, slot_start, slot_end,
                      overlap)
        shared = False
        for s in range(k):
            shared = shared or cfg[s, CFG_ASHARE] > 0.5
        if ashift is not None and shared:
            _extra_windows(k, tm_, m_div, bcls, ashift, apq, hist)
        else:
            hist[:] = 0.0
            hist[0] = 1.0
        # merged in place: a helper returning (out, keys, m) took 110 us a call here, not 19 (h100, 196 x 4
        # tiles, 2 CTAs an SM; measured)
        for s in range(k):
            for b in range(hist.shape[0]):
                if hist[b] == 0.0:
                    continue
                cfg[s, CFG_NA_EXTRA] = 0.25 * b
                key, key2 = _config_key(cfg, s, base)
                found = -1
                for j in range(m):
                    if keys[j, 0] == key and keys[j, 1] == key2 and out[j, CFG_SUB] == cfg[s, CFG_SUB]:
                        found = j
                        break
                if found >= 0:
                    out[found, CFG_WEIGHT] += pairs[i, 2] * hist[b]
                    continue
                if m == keys.shape[0]:                 # full: both arrays doubled
                    grown = np.zeros((2 * m, _CFG_COLS), np.float64)
                    gkeys = np.empty((2 * m, 2), np.int64)
                    for j in range(m):
                        gkeys[j, 0], gkeys[j, 1] = keys[j, 0], keys[j, 1]
                        for c in range(_CFG_COLS):
                            grown[j, c] = out[j, c]
                    out = grown
                    keys = gkeys
                keys[m, 0], keys[m, 1] = key, key2
                for c in range(1, _CFG_COLS):
                    out[m, c] = cfg[s, c]
                out[m, CFG_WEIGHT] = pairs[i, 2] * hist[b]
                m += 1
    return out[:m]


def filters_in_step(cfg, keep):
    """``cfg`` (`sm_config_summary`'s rows) where an earlier slot's filter tile (BREP) is shared by only
    the share ``keep`` of the CTAs that hold it; the others read theirs as first holders (BREP and its
    gap cleared, the weight split)."""
    if keep >= 1.0:
        return cfg
    rows = []
    for row in cfg:
        if row[CFG_BREP] > 0.5:
            alone = row.copy()
            alone[CFG_WEIGHT] *= 1.0 - keep
            alone[CFG_BREP] = alone[CFG_GAPB] = 0.0
            row = row.copy()
            row[CFG_WEIGHT] *= keep
            rows.append(alone)
        rows.append(row)
    return np.array(rows, np.float64).reshape(-1, cfg.shape[1])


# the model's schedule statistics enumerate at most this many (wave, SM) pairs / waves, so the cost of a
# prediction does not grow with the batch size
SM_SAMPLES = 128
WAVE_SAMPLES = 48
GAP_MAX = 64           # re-fetch gaps (waves) from GAP_MAX on share the last bin
_NEVER = -1


@njit(cache=True, inline="always")
def _row_of(v, g, full_rows):
    """(row, first valid index of the row, run length l) of valid index v."""
    r = v // g
    if r > full_rows:
        r = full_rows
    return r, r * g


@njit(cache=True)
def last_before(x, a, tiles_m, tiles_n, swz):
    """Valid index of the last block of tile_m x before valid index a (-1: none)."""
    width = 1 << swz
    g = tiles_m * width
    full_rows = tiles_n >> swz
    rem = tiles_n - (full_rows << swz)
    if a <= 0:
        return _NEVER
    r, start = _row_of(a - 1, g, full_rows)
    ell = width if r < full_rows else rem
    first = start + x * ell
    if first < a:
        return min(a - 1, first + ell - 1)
    if r == 0:
        return _NEVER
    return (r - 1) * g + (x + 1) * width - 1         # rows before the last one are full


@njit(cache=True)
def _gap(x, a, w, per_wave, tiles_m, tiles_n, swz):
    """Waves since tile_m x was last read before wave w starts at a (GAP_MAX + 1: never)."""
    last = last_before(x, a, tiles_m, tiles_n, swz)
    if last < 0:
        return GAP_MAX + 1
    return min(w - last // per_wave, GAP_MAX)


@njit(cache=True)
def _hist_tiles(x0, x1, a, w, per_wave, tiles_m, tiles_n, swz, hist, weight):
    """hist[gap of x] += weight for tiles x in [x0, x1] (never-read tiles not counted). The gap is a
    non-increasing step function of x between the breakpoints of last_before, so runs of equal gap
    are skipped by bisection: O(number of distinct gaps x log)."""
    x = x0
    while x <= x1:
        gx = _gap(x, a, w, per_wave, tiles_m, tiles_n, swz)
        lo = x
        hi = x1
        while lo < hi:                       # last x' in [x, x1] with the same gap
            mid = (lo + hi + 1) // 2
            if _gap(mid, a, w, per_wave, tiles_m, tiles_n, swz) == gx:
                lo = mid
            else:
                hi = mid - 1
        if gx <= GAP_MAX:
            hist[gx] += weight * (lo - x + 1)
        x = lo + 1


@njit(cache=True)
def _run(lo, hi, xa, a, w, per_wave, tiles_m, tiles_n, swz, hist_a, hist_h, weight):
    """Tiles [lo, hi] read by wave w (starting at valid index a; xa: the tile_m of block a): their
    gaps into hist_a, the boundaries they touch into hist_h. last_before is increasing in x on each
    piece x < xa, x == xa, x > xa, so gaps do not increase there (bisection in _hist_tiles) and a
    boundary (x, x + 1) inside a piece has gap min(g_x, g_{x+1}) = g_{x+1}."""
    p0 = lo
    prev_hi = -1
    for piece in range(3):
        if piece == 0:
            p1 = min(hi, xa - 1)
        elif piece == 1:
            p1 = min(hi, xa)
        else:
            p1 = hi
        if p1 < p0:
            continue
        _hist_tiles(p0, p1, a, w, per_wave, tiles_m, tiles_n, swz, hist_a, weight)
        if p1 > p0:
            _hist_tiles(p0 + 1, p1, a, w, per_wave, tiles_m, tiles_n, swz, hist_h, weight)
        if prev_hi >= 0:                     # junction with the previous piece
            gx = min(_gap(prev_hi, a, w, per_wave, tiles_m, tiles_n, swz),
                     _gap(p0, a, w, per_wave, tiles_m, tiles_n, swz))
            if gx <= GAP_MAX:
                hist_h[gx] += weight
        prev_hi = p1
        p0 = p1 + 1
    # the run's two outer boundaries, shared with tiles outside the wave
    if lo > 0:
        gx = min(_gap(lo - 1, a, w, per_wave, tiles_m, tiles_n, swz),
                 _gap(lo, a, w, per_wave, tiles_m, tiles_n, swz))
        if gx <= GAP_MAX:
            hist_h[gx] += weight
    if hi < tiles_m - 1:
        gx = min(_gap(hi + 1, a, w, per_wave, tiles_m, tiles_n, swz),
                 _gap(hi, a, w, per_wave, tiles_m, tiles_n, swz))
        if gx <= GAP_MAX:
            hist_h[gx] += weight


@njit(cache=True)
def _wave(w, ctas, per_wave, tiles_m, tiles_n, swz, hist_a, hist_b, hist_h, weight, row):
    """Add wave w's histograms (see wave_stats) with ``weight``; its row of `wave_stats`'s ``per`` into
    ``row``."""
    width = 1 << swz
    g = tiles_m * width
    full_rows = tiles_n >> swz
    rem = tiles_n - (full_rows << swz)
    a = w * per_wave
    b = min(ctas, a + per_wave)
    # tile_m intervals of the wave's row segments, merged into at most two runs
    r, start = _row_of(a, g, full_rows)
    ell = width if r < full_rows else rem
    xa = (a - start) // ell
    end1 = min(b, start + tiles_m * ell)
    xb = (end1 - 1 - start) // ell
    run0_lo = xa
    run0_hi = xb
    run1_lo = 1
    run1_hi = 0                               # empty
    nb = 0
    # B: lanes of the first segment; those already seen in this row before a were read l blocks ago
    nl = min(ell, end1 - a)
    nb += nl
    for i in range(nl):
        lane = (a - start + i) % ell
        if lane < a - start:                  # the lane occurred in this row before a
            last = a - 1 - ((a - 1 - start - lane) % ell)
            hist_b[min(w - last // per_wave, GAP_MAX)] += weight
    pos = end1
    rr = r + 1
    while pos < b:
        ell2 = width if rr < full_rows else rem
        e2 = min(b, pos + tiles_m * ell2)
        x2 = (e2 - 1 - pos) // ell2
        nb += min(ell2, e2 - pos)
        if x2 >= run0_lo - 1:
            run0_lo = 0
            run0_hi = tiles_m - 1
        elif run1_hi < run1_lo or run1_hi < x2:
            run1_lo = 0
            run1_hi = x2
        pos = e2
        rr += 1
    na = run0_hi - run0_lo + 1 + max(0, run1_hi - run1_lo + 1)
    nruns = 1 + (run1_hi >= run1_lo)
    for k in range(nruns):
        lo = run0_lo if k == 0 else run1_lo
        hi = run0_hi if k == 0 else run1_hi
        _run(lo, hi, xa, a, w, per_wave, tiles_m, tiles_n, swz, hist_a, hist_h, weight)
    row[0], row[1], row[2], row[3], row[4] = weight, na, nb, b - a, nruns


@njit(cache=True)
def wave_stats(tiles_m, tiles_n, swz, per_wave, max_samples):
    """Per-wave tile statistics for the L2 model, summed over all waves (at most ``max_samples`` of
    the full waves, scaled, plus the last wave):

    hist_a[g]: tile_m fetches (a wave reading a tile_m) whose tile was last read g waves earlier
    (1 <= g; GAP_MAX: that many or more); first reads are not counted.
    hist_b[g]: the same for tile_n (B slices).
    hist_h[g]: halo re-reads: boundaries (x, x + 1) between adjacent tile_m touched by the wave
    (one of the two tiles is in it) that were touched before, g waves earlier (the more recent of
    the two tiles' last reads before the wave).
    sums: [distinct tile_m, distinct tile_n, CTAs, waves, tile_m runs, CTAs x distinct tile_m, CTAs x
    distinct tile_n], summed over waves (the last two give the tiles of a CTA's own wave, averaged over
    CTAs rather than waves).
    per: one row per wave counted, [weight (waves it stands for), distinct tile_m, distinct tile_n,
    CTAs, tile_m runs] (`wave_classes`)."""
    ctas = tiles_m * tiles_n
    waves = (ctas + per_wave - 1) // per_wave
    hist_a = np.zeros(GAP_MAX + 1, np.float64)
    hist_b = np.zeros(GAP_MAX + 1, np.float64)
    hist_h = np.zeros(GAP_MAX + 1, np.float64)
    n_inner = waves - 1
    take = min(n_inner, max(1, max_samples))
    per = np.zeros((take + 1 if n_inner > 0 else 1, 5), np.float64)
    if n_inner > 0:
        wgt = n_inner / take
        for i in range(take):
            _wave(sample_index(i, take, n_inner), ctas, per_wave, tiles_m, tiles_n, swz, hist_a, hist_b, hist_h,
                  wgt, per[i])
    _wave(waves - 1, ctas, per_wave, tiles_m, tiles_n, swz, hist_a, hist_b, hist_h, 1.0, per[per.shape[0] - 1])
    # the sums, wave by wave in the order the waves were counted
    sums = np.zeros(7, np.float64)
    for i in range(per.shape[0]):
        weight, na, nb, nc, nruns = per[i, 0], per[i, 1], per[i, 2], per[i, 3], per[i, 4]
        sums[0] += weight * na
        sums[1] += weight * nb
        sums[2] += weight * nc
        sums[3] += weight
        sums[4] += weight * nruns
        sums[5] += weight * nc * na
        sums[6] += weight * nc * nb
    return hist_a, hist_b, hist_h, sums, per


@njit(cache=True)
def block_index(x, j, tiles_m, tiles_n, swz):
    """Valid block index of tile (x, j): the inverse of `tile_of`."""
    width = 1 << swz
    full_rows = tiles_n >> swz
    r = j >> swz
    if r < full_rows:
        return r * tiles_m * width + (x << swz) + (j & (width - 1))
    rem = tiles_n - (full_rows << swz)
    return full_rows * tiles_m * width + x * rem + (j - (full_rows << swz))


@njit(cache=True)
def column_pair_gaps(tiles_m, tiles_n, swz, per_wave, share, max_samples):
    """Waves between the reads of tile_m x by columns j - 1 and j (j >= 1): (hist_in, hist_first), the pairs
    whose column j is not, and is, the first of ``share`` consecutive columns (kSingleGroup: a group's columns
    split its filters and read one channel range; its first column reads new channels but those sectors the
    group before shares). hist[g]: pairs g waves apart (0: in one wave; GAP_MAX: that many or more), over
    every tile_m (at most ``max_samples`` of them, scaled). A tile's blocks come in ascending column order
    (`tile_of`), so column j - 1 is the last to read x before column j, whatever the swizzle."""
    hist_in = np.zeros(GAP_MAX + 1, np.float64)
    hist_first = np.zeros(GAP_MAX + 1, np.float64)
    take = min(tiles_m, max(1, max_samples))
    weight = tiles_m / take
    for i in range(take):
        x = sample_index(i, take, tiles_m)
        prev = block_index(x, 0, tiles_m, tiles_n, swz) // per_wave
        for j in range(1, tiles_n):
            w = block_index(x, j, tiles_m, tiles_n, swz) // per_wave
            if j % share != 0:
                hist_in[min(w - prev, GAP_MAX)] += weight
            else:
                hist_first[min(w - prev, GAP_MAX)] += weight
            prev = w
    return hist_in, hist_first


@functools.lru_cache(maxsize=4096)
def last_wave_hists(tiles_m, tiles_n, swz, per_wave) -> tuple:
    """(hist_a, hist_h) of the grid's last wave alone (`wave_stats`' histograms sum every wave): its
    re-reads meet the footprint of a full wave before it and of its own few CTAs."""
    ctas = tiles_m * tiles_n
    waves = (ctas + per_wave - 1) // per_wave
    hist_a = np.zeros(GAP_MAX + 1, np.float64)
    hist_b = np.zeros(GAP_MAX + 1, np.float64)
    hist_h = np.zeros(GAP_MAX + 1, np.float64)
    _wave(waves - 1, ctas, per_wave, tiles_m, tiles_n, swz, hist_a, hist_b, hist_h, 1.0, np.zeros(5, np.float64))
    hist_a.setflags(write=False)
    hist_h.setflags(write=False)
    return hist_a, hist_h


@functools.lru_cache(maxsize=4096)
def refetch_waves(tiles_m, tiles_n, swz, sms, cps) -> tuple:
    """`model._tile_refetches`' figures of a grid, once: (full-wave means (distinct tile_m, tile_n, CTAs,
    tile_m runs), the partial last wave's (zeros where the last wave is full), A's re-read histograms of
    the full waves and of the last one, and the same for the halo rows)."""
    hist_a, _hb, hist_h, _sums, per = grid_schedule(tiles_m, tiles_n, swz, sms, cps)[1]
    rows = per.shape[0]
    partial = rows > 1 and per[rows - 1, 3] < sms * cps
    full = per[:rows - 1] if partial else per
    means = (full[:, 1:5] * full[:, :1]).sum(axis=0) / full[:, 0].sum()
    if partial:
        last_a, last_h = last_wave_hists(tiles_m, tiles_n, swz, sms * cps)
        last = per[rows - 1, 1:5].copy()
    else:
        last_a, last_h = np.zeros_like(hist_a), np.zeros_like(hist_h)
        last = np.zeros(4)
    out = (np.maximum(hist_a - last_a, 0.0), last_a, np.maximum(hist_h - last_h, 0.0), last_h)
    for x in out:
        x.setflags(write=False)
    # the means as Python floats (the model's scalar glue)
    return (tuple(means.tolist()), tuple(last.tolist())) + out


# waves whose distinct tile_m differ by more than this ratio are judged apart against the L2 cliff
WAVE_CLASS_RATIO = 1.1


@njit(cache=True)
def wave_classes(per, tiles_m) -> np.ndarray:
    """Classes of waves alike in their distinct tiles (`wave_stats`'s ``per``), for the within-CTA L2
    distances, which the convex L2 cliff must see per class rather than averaged: rows [weight, distinct
    tile_m and tile_n of a CTA's wave (averaged over the class's CTAs), the class's tile_m fetches / tiles_m
    (its share of "once per wave and tile_m"), tile_m runs of a wave (averaged likewise)]. Waves are sorted
    by distinct tile_m; a class takes the next wave while it has at most `WAVE_CLASS_RATIO` times the
    class's first. Seed 4 #15 (swizzle 1, 3 tile columns: waves of 60 tile_m, the column pair's, then of
    120, the lone column's) averaged 80, below the cliff: A DRAM reads 3.28 M simulated, 0.99 M predicted."""
    n = per.shape[0]
    order = np.empty(n, np.int64)                 # insertion sort by distinct tile_m, stable
    for i in range(n):
        j = i
        while j > 0 and per[order[j - 1], 1] > per[i, 1]:
            order[j] = order[j - 1]
            j -= 1
        order[j] = i
    out = np.zeros((n, 5), np.float64)
    m = 0
    start = 0
    for i in range(1, n + 1):
        if i == n or per[order[i], 1] > WAVE_CLASS_RATIO * per[order[start], 1]:
            w = 0.0
            ctas = 0.0
            for k in range(start, i):
                row = order[k]
                wc = per[row, 0] * per[row, 3]
                w += per[row, 0]
                ctas += wc
                out[m, 1] += wc * per[row, 1]
                out[m, 2] += wc * per[row, 2]
                out[m, 3] += per[row, 0] * per[row, 1]
                out[m, 4] += wc * per[row, 4]
            out[m, 0] = w
            out[m, 1] /= ctas
            out[m, 2] /= ctas
            out[m, 3] /= tiles_m
            out[m, 4] /= ctas
            m += 1
            start = i
    return out[:m]



@njit(cache=True)
def l2_classes(per, tiles_m, cap_lines, b_lines_round, dens_lines, tile_m, halo_rows):
    """`wave_classes` as the L2 terms read them (`_reuse.miss_rows`, `_reuse.halo_misses`), one row a class:
    [distinct tile_m, the wave's distinct A lines (its tiles and one halo of ``halo_rows`` GEMM rows per run,
    ``dens_lines`` lines a row), its B lines a round (``b_lines_round`` a distinct tile_n), each over the
    L2's ``cap_lines``; the class's weight]."""
    cls = wave_classes(per, tiles_m)
    out = np.empty((cls.shape[0], 4), np.float64)
    for c in range(cls.shape[0]):
        out[c, 0] = cls[c, 1] / cap_lines
        out[c, 1] = dens_lines * (cls[c, 1] * tile_m + cls[c, 4] * halo_rows) / cap_lines
        out[c, 2] = cls[c, 2] * b_lines_round / cap_lines
        out[c, 3] = cls[c, 3]
    return out


@njit(cache=True)
def with_columns(cls, a, b):
    """``cls`` (`l2_classes`' rows) with two columns more, ``a`` and ``b`` in every row (compiled: the numpy
    hstack of a tiled pair cost 0.6 % of a pass over the fprop networks)."""
    n, k = cls.shape
    out = np.empty((n, k + 2), np.float64)
    out[:, :k] = cls
    out[:, k] = a
    out[:, k + 1] = b
    return out


@njit(cache=True)
def tile_m_classes(tm, tiles_m, M):
    """The GEMM-M tile classes: (rows, share of M) of the full tiles and of a partial last one."""
    last_m = M - (tiles_m - 1) * tm
    if last_m == tm:
        out = np.empty((1, 2), np.float64)
        out[0, 0], out[0, 1] = tm, 1.0
    else:
        out = np.empty((2, 2), np.float64)
        out[0, 0], out[0, 1] = tm, (tiles_m - 1) * tm / M
        out[1, 0], out[1, 1] = last_m, last_m / M
    return out


@memo(4096)
def grid_schedule(tiles_m, tiles_n, swz, sms, cps) -> tuple:
    """(`sm_config_summary`, `wave_stats`) of a grid on ``sms`` SMs of ``cps`` CTAs each: a layer's shape on
    the GPUs of one SM count (and its batches of one grid) shares them; memoized, read-only."""
    cfg = sm_config_summary(tiles_m, tiles_n, swz, sms, cps, SM_SAMPLES)
    waves = wave_stats(tiles_m, tiles_n, swz, cps * sms, WAVE_SAMPLES)
    for a in (cfg,) + tuple(waves):
        a.setflags(write=False)
    # the wave sums as Python floats: the model's glue does its scalar arithmetic on them (numpy scalars cost
    # 5-10 times as much an operation)
    hist_ra, hist_rb, hist_rh, wsum, wave_tab = waves
    return cfg, (hist_ra, hist_rb, hist_rh, tuple(wsum.tolist()), wave_tab)
