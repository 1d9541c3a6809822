"""The hierarchy's compiled phases (used by ``simcore.hierarchy.Hierarchy``, which documents the
semantics): bucketing requests by SM, each SM's L1, bucketing the L2-bound sectors by slice, each
L2 slice, and the single-loop reference ``_feed_serial``. Counters: L1 ``[sm, (kind * 4 + operand) * 4
+ k]`` (``_l1_counter``; k: requests, sectors, sector hits, sector misses, the keys of
``simcore.metrics.KIND_KEYS``), L2 ``[slice, operand * 8 + k]``, k as in ``hierarchy._L2_KEYS``.

Request kinds (``simcore.metrics.KIND_*``): 0 ``ld`` and 3 ``cp.async.ca`` look up (and allocate in)
the L1 and differ only in their counters; 1 (store) and 2 (``cp.async.cg``) leave the L1 alone and
send every sector to the L2, as a write and as a read. The L1 loops test one bit of the packed
kind and operand per request (``_looks_up_l1``), so a SIMT stream (kinds 0 and 1) runs the same
per-sector code as before the kinds came.

Line -> slot maps: the bucketed phases find a line's slot with ``cache._access_mapped`` in a plain
array ``lmap`` indexed by the line (the L2's by its key within the slice, see ``_l2_key_set``),
instead of a hash table. One cache's run of accesses enters that cache's lines first and clears
them after (``_map_lines``: a pass over its slots, cheap against the thousands of accesses of a
chunk), so one map per thread serves all 80 L1s and all L2 slices, and it holds exactly the lines of
the cache at work: a lookup is one load, a miss two stores, with no hashing, probing or
backward-shift deletion. The hash tables (still what ``simulate_trace`` and the issue-order
``_feed_serial`` use) go stale meanwhile; the hierarchy rebuilds them from the slots' lines when it
goes back to issue order. The map costs 2 bytes per line of the addresses in use (the hierarchy
bounds it, see ``hierarchy._MAP_MAX_LINES``).

Parallel scheme: SMs' L1s are independent, and so are L2 slices. Per chunk, the L1 phase runs the
SMs that have requests in parallel (requests bucketed per SM by a stable counting sort; each SM
keeps its own counters and writes, per sector, the L2 slice it goes to or -1 for an L1 hit), then
the L2-bound sectors are bucketed per slice (stable, request by request, so each slice sees its
sectors in issue order; their L2 keys are built here), then the L2 phase runs slices in parallel,
each with its own counters. The serial path runs the same per-SM / per-slice order on one thread:
keeping one cache's state hot while it works is what makes it fast (a single loop in issue order,
kept as the reference ``_feed_serial``, runs at about a third of the speed: its 80 L1 and 64 L2
states do not fit the CPU caches). L2-bound sectors are copied into slice order (``_l2_bucket_*``)
rather than gathered: gathering cost ~60 ns per L2 access in cache misses.

Measured with ``python benchmarks/bench_phases.py`` (vgg16 conv2_2 b1 on v100, one thread, best of 5;
the 2-core development VM's figures vary by +-20 % between runs; the first two rows with the same
phase timing in the script that became it), ns per L1 load sector:

==========================================  ========  ======  =======  =========  =======
state of the code                           generate  bucket  L1       L2 bucket  L2
==========================================  ========  ======  =======  =========  =======
int32 cache state, L1 phase writes 12 B     9-11      0.6     23       2-3.5      13.6
int16 cache state (``simcore.cache``)       9-11      0.6     18       2-3        8.7
L1 phase writes a 2-byte slice per sector   2.5-3     0.5     15-19    4.2-4.8    9.5-12
requests bucketed as one packed 8-byte run  2.4-3     0.7     14-17    3.8-5.0    9.1-12
same, in alternating runs with the next *   2.5       0.9     16.8     5.0        11.4
kernels take one cache's rows (1-D views) * 2.3       0.8     12.4     4.2        8.9
same, in alternating runs with the next **   3.1       0.9     13.4     4.7        11.1
constant geometry, flat counters, ``_U`` ** 2.8       0.9     11.7     4.3        8.8
same, in alternating runs with the next *** 1.9       0.7     9.6      3.5        6.5
line -> slot maps (``_access_mapped``) ***  2.0       0.8     6.8      3.8        4.7
same, in alternating runs with the next +   2.9       0.7     6.8      3.8        5.2
previous line and slot in registers +       2.5       0.7     6.2      3.9        4.5
==========================================  ========  ======  =======  =========  =======

(* medians of six runs of ``bench_phases.py --reps 2``, the two versions alternating, on a day when
the machine ran slower than on the earlier rows' days; the generator's own speed-up is in
``traces._generate``). On conv2_2 every L1 lookup is a tag miss that evicts (SMs 0 and 1 checked
with ``simulate_trace``: the layer's A and B rows all fall in one of the 4 sets, about 270 lines per
k-step of an SM's two CTAs against 192 ways); ``perf`` (cpu-clock samples) puts most of the L1 phase
on the loads of the victim's record and hash-table neighbourhood, last touched one LRU cycle (768
lookups) earlier: the fewer bytes the phase streams per sector, the more of the SM's cache state is
still in the CPU's L1d then (writing the L2 key there as well: 4 ns more per sector). Tried and not
kept: occupancy bits beside the hash table, so that a miss skips its table load (L1 phase 16 -> 20
ns: one more array to keep hot); table load factor 1/2 (16 -> 19 ns); software prefetch of the next
victims (no change).

(** medians of six alternating runs of ``bench_phases.py --reps 2`` on a noisy day: paired ratio of
the totals 0.67-1.07, median 0.85; best runs 30.0 -> 23.2 ns.) The phases are bound by the number
of instructions they execute, not by waiting on memory. Counted with ``valgrind --tool=callgrind
--dump-instr=yes`` on one 1 M-sector chunk of conv2_2 (deterministic, unlike the timings here),
instructions per L1 load sector, before -> after the last row's change: L1 phase 131 -> 103, L2
phase 112 -> 84, L2 bucketing 40 -> 31. At ~11 ns per L1 sector, 131 instructions is 3-4 per
cycle at this CPU's 2.6-3.5 GHz, and a scratch loop that interleaved two SMs' accesses (two
independent dependency chains for the out-of-order core) was no faster than one SM at a time (L1
lookups alone, four alternating runs: 12.9-15.1 ns against 11.1-14.7). (Both counts come from code
Numba compiled under valgrind, in a fresh cache directory.) The instructions that went:
negative-index wraparound code on signed indices (now ``_U``), shift amounts, index kind and slice
hash read at run time (now constants in the common geometry's copy of each loop, see ``_l1_sm``
and ``_l2_slice``), the L2 geometry re-read from its array at every access, and stride multiplies
on the 3-D counter arrays (now flat rows). Tried after it and dropped: the L1 phase writing each
L2-bound sector's finished L2 key over its address in the (trusted) sector array, so that the L2
bucketing only copies: L2 bucketing 4.8 -> 3.3 ns, but L1 phase 10.4 -> 14.7 (medians of five
alternating runs; paired ratio of the totals 1.05, worse).

(*** medians of four alternating runs of ``bench_phases.py --reps 2`` in a quiet period: all phases
22.4 -> 18.9 ns, paired ratio of the totals 0.78-0.99, median 0.81; on h100, three runs: 22.4 ->
18.4 ns, L1 9.2 -> 6.8, L2 6.6 -> 5.0, paired median 0.79. Whole pipeline, ``bench_traces.py``,
simulate_layer on one thread, two runs alternating with the code before: 54.7 and 48.8 M/s against
38.8 and 42.8.) The maps were first tried in a ``/tmp`` scratch copy of the L1 phase, in the same
process as the hash-table phase (identical keys and counters, best of 4-5): conv2_2 9.7 -> 5.8-5.9
ns, conv1_2 11.1 -> 7.8, conv4_2 11.2 -> 6.8. callgrind, one conv2_2 chunk, instructions per L1 load
sector: L1 phase 101 -> 80, L2 phase 84 -> 69, L2 bucketing 31 -> 44 (the set index is computed
there now, and packed with the key, instead of in the L2 phase). The time fell by more than the
instructions: the hash probe's chain of dependent loads (hash, table, ``sline``) and the
backward-shift deletion's data-dependent branches went with them. The L2 map is indexed by the
slice key: q = line // slices where the slice count is a power of two, which keeps one slice's
entries together; by the line itself (every 64th entry), conv5_1 had run 14 % slower than with the
hash tables. Tried and not kept: the common geometry as constants in the L2 bucketing (the scatter
alone 2.8 -> 2.5 ns on conv2_2, in the same process: another compiled copy for ~1.5 %; the whole
bucketed feed, two same-process runs over conv1_2, conv2_2, conv4_2 and conv5_1: ratio 0.91-0.92
with it and 0.92 without, against the code before the next row).

(+ medians of four alternating runs of ``bench_phases.py --reps 2``; paired ratio of the totals
0.70-1.30, median 0.86.) Each L1 and L2 loop keeps its cache's previous line and slot in local
variables, which ``_access_mapped`` takes and returns (it takes the same-line shortcut), and stores
them back into ``last`` after the run: before, ``_access_mapped`` read and wrote ``last`` in memory
at every access, with the array's address reloaded from the stack. The whole bucketed feed in the
same process (best of 4, the two versions alternating): 0.92, 0.92 on v100 (conv1_2, conv2_2,
conv4_2, conv5_1) and 0.97 on h100 (conv2_2, conv3_1, conv5_1); the loops first took the shortcut
themselves, and moving it into ``_access_mapped`` measured the same (0.99 and 1.01 on v100, 0.97 on
h100, same process). Tried after it and dropped: where the slice
count is not a power of two (the L2 keys are lines, each in one slice only), one L2 map that lasts
from chunk to chunk instead of each slice's 2048-5120 lines entered and cleared per chunk (a100,
h100): the whole bucketed feed in the same process, h100 0.94 / 0.98 / 1.01 on conv2_2 / conv3_1 /
conv5_1, a100 1.00 / 1.02 on conv1_2 / conv4_2: not worth the extra state it must keep in step.

Request kinds (``cp.async``, 2 bits where the store flag was one): callgrind instructions per L1
load sector, counted around each phase's call only (client requests toggling the collection), on
chunk 3 of vgg16 conv2_2 (v100; 258,856 requests, 1.03 M sectors, all loads), code loaded from the
Numba cache compiled under valgrind, before -> after: bucketing by SM 8.35 -> 8.35, L1 phase 76.2
-> 73.5, L2 bucketing 44.3 -> 44.3, L2 65.3 -> 65.3; on its last chunk (50,176 of 174,136 requests
stores): L1 phase 43.1 -> 41.3 M instructions, the others equal. (The kind tested per request as
``kind == 1`` in the L2 bucketing cost 2 instructions per request; the 4-entry ``_WRITE_BIT`` table
costs none.) Times: ``bench_phases.py --reps 2``, 20 runs alternating with the code before on the
busy 2-core machine, medians: L1 6.05 vs 6.15 ns, L2 bucketing 3.85 vs 3.60, L2 4.20 vs 4.20, paired
ratio of the four phases' sum 1.007 (0.93-1.23); same-process A/B of the kernels, 30 rounds three
times: L1 0.97-0.98, L2 bucketing 0.99-1.05: no change beyond the noise.
"""
from __future__ import annotations

import numpy as np
from numba import get_thread_id, prange

from ._jit import njit
from .cache import _U, _access, _access_mapped, _cache_rows, _set_of

# Numba's on-disk cache checks only this file's own time stamp, but the kernels here compile in
# code and constants from cache.py. tests/test_jit_deps.py checks this digest of it: updating
# the digest after an edit there changes this file too, so no stale compiled kernel survives.
_JIT_DEPS_SHA256 = "d075b6282303f085"


@njit(cache=True, _nrt=False, inline="always")
def _slice_of(line, slices, xor_hash, pow2):
    """L2 slice of ``line``; ``pow2``: ``slices`` is a power of two (masking instead of a 64-bit
    division, ~40 cycles). Callers pass constant flags where they can, so the tests fold away."""
    h = line ^ (line >> 7) ^ (line >> 14) if xor_hash else line
    return h & (slices - 1) if pow2 else h % slices


# The L2 bucketing packs each sector as key << _PACK_LINE | set << 6 | is_store << 5 | operand << 3 |
# sector (key: see ``_l2_key_set``, at most the line): the bucketed paths run only while every line is
# below 2**(63 - _PACK_LINE) (the hierarchy's map limit, ``hierarchy._MAP_MAX_LINES``), which leaves
# 32 bits for the set.
_PACK_LINE = 38


@njit(cache=True, _nrt=False, inline="always")
def _l2_key_set(line, slices, slice_shift, sets, kind, sbits):
    """(key, set) of ``line`` within its L2 slice. The set is the slice's index function of
    q = line // slices. The key names the line within the slice: q itself for a power-of-two slice
    count (``slice_shift`` = log2 slices >= 0; unique for either slice hash, whose low bits are an
    invertible function of line mod slices given q: checked for every line below 2**20 and 1 to 2**14
    slices), else the line (with 80 slices and the xor hash, q made about 1 line in 5 alias another).
    The dense q keeps a slice's entries in the line -> slot map close together."""
    if slice_shift >= 0:
        q = line >> slice_shift
        return q, _set_of(q, sets, kind, sbits)
    return line, _set_of(line // slices, sets, kind, sbits)


@njit(cache=True, _nrt=False, inline="always")
def _l2_count(r, tags, counts, sector, write, op, spl):
    """Count one L2 access with ``_access``'s result ``r`` in its slice's counters (``counts[op * 8 + k]``,
    k as in ``hierarchy._L2_KEYS``); ``tags``: the slice's operand tag per sector (for the DRAM writes
    of evicted dirty sectors)."""
    outcome = r & 3
    slot = r >> 10
    if outcome == 2:
        evicted = (r >> 2) & 255
        k = 0
        while evicted:                           # dirty sectors of the evicted line go to DRAM
            if evicted & 1:
                counts[_U(tags[_U(slot * spl + k)] * 8 + 7)] += 1
            evicted >>= 1
            k += 1
    base = op * 8
    if write:
        tags[_U(slot * spl + sector)] = op
        counts[_U(base + 3)] += 1
        counts[_U(base + (4 if outcome == 0 else 5))] += 1
    else:
        counts[_U(base)] += 1
        if outcome == 0:
            counts[_U(base + 1)] += 1
        else:
            counts[_U(base + 2)] += 1
            counts[_U(base + 6)] += 1


@njit(cache=True, _nrt=False, inline="always")
def _map_lines(lmap, sline, on):
    """Enter (``on``) or clear every line one cache holds in the shared line -> slot map ``lmap``."""
    for slot in range(sline.shape[0]):
        line = sline[_U(slot)]
        if line >= 0:
            lmap[_U(line)] = slot if on else -1


@njit(cache=True, _nrt=False, inline="always")
def _l1_counter(kind_op):
    """First of the four L1 counters of ``kind_op`` = kind << 2 | operand (bits above are ignored) in
    an SM's row: requests, sectors, sector hits, sector misses (the last two only for the kinds that
    look up the L1)."""
    return (kind_op & 15) << 2


@njit(cache=True, _nrt=False, inline="always")
def _looks_up_l1(kind_op):
    """Whether the kind of ``kind_op`` = kind << 2 | operand looks up the L1: kinds 0 (``ld``) and 3
    (``cp.async.ca``) do, 1 (store) and 2 (``cp.async.cg``) do not (the kind's two bits are equal)."""
    return ((kind_op ^ (kind_op >> 1)) & 4) == 0


# L2 bucketing: the is_store bit (bit 5 of a packed L2 sector, see ``_scatter_part``) of each kind
_WRITE_BIT = np.array([0, 32, 0, 0], np.int64)


@njit(cache=True, _nrt=False, inline="always")
def _count_request(counts, base, n):
    """A request of ``n`` sectors (``counts``: its SM's row of L1 counters, ``base``: its kind and
    operand's ``_l1_counter``): one l1tex request and its sectors."""
    counts[_U(base)] += 1
    counts[_U(base + 1)] += n


@njit(cache=True, _nrt=False)
def _feed_serial(l1, g1, l1c, l2, g2, tags, l2c, shifts, slices, slice_shift, xor_hash,
                 req_sm, req_op, req_kind, req_first, req_count, sectors):
    """Whole chunk in issue order on one thread (the reference for the bucketed paths), with the hash
    tables (``_access``): for address ranges beyond the bucketed paths' line -> slot map. Within a
    slice a line is cached under the key of ``_l2_key_set``."""
    l1_line, l1_sec, l1_mask, l2_line, l2_sec, l2_mask = shifts[0], shifts[1], shifts[2], shifts[3], shifts[4], shifts[5]
    spl2 = l2_mask + 1
    pow2 = slices & (slices - 1) == 0
    for r in range(req_sm.shape[0]):
        sm = req_sm[r]
        op = req_op[r]
        kind_op = (req_kind[r] << 2) | op
        lookup = _looks_up_l1(kind_op)
        store = req_kind[r] == 1
        base = _l1_counter(kind_op)
        first = req_first[r]
        n = req_count[r]
        _count_request(l1c[sm], base, n)
        for i in range(first, first + n):
            a = sectors[i]
            if lookup:
                table, rec, sline, lru, last = _cache_rows(l1, sm)
                line = a >> l1_line
                o = _access(table, rec, sline, lru, last, line, _set_of(line, g1[0], g1[2], g1[3]),
                            (a >> l1_sec) & l1_mask, False, g1[1], g1[4], g1[5])
                if o & 3 == 0:
                    l1c[sm, base + 2] += 1
                    continue
                l1c[sm, base + 3] += 1
            line = a >> l2_line
            sl = _slice_of(line, slices, xor_hash, pow2)
            table, rec, sline, lru, last = _cache_rows(l2, sl)
            sector = (a >> l2_sec) & l2_mask
            key, s = _l2_key_set(line, slices, slice_shift, g2[0], g2[2], g2[3])
            o = _access(table, rec, sline, lru, last, key, s, sector, store, g2[1], g2[4], g2[5])
            _l2_count(o, tags[sl], l2c[sl], sector, store, op, spl2)


@njit(cache=True, _nrt=False)
def _bucket_requests(req_sm, req_op, req_kind, req_first, req_count, nsms, starts, reqs):
    """Requests in SM order (stable), each packed as first << 20 | count << 4 | kind << 2 | operand:
    the L1 phase then reads one sequential 8-byte stream per SM instead of five arrays through an index
    (fewer streamed bytes: they compete for the CPU's L1d with the SM's cache state)."""
    for k in range(nsms + 1):
        starts[k] = 0
    # requests come in runs of one SM (a CTA's k-step: tens of requests), so the run's count and its
    # next position are kept in registers (no store-to-load chain through starts per request; see
    # _scatter_part): vgg16 batch 2 on one thread (bench_phases.py, two runs alternating with the
    # per-request version), ns per L1 load sector: fprop conv2_2 0.6, 0.6 -> 0.6, 0.5, dgrad conv1_1
    # 0.7, 0.7 -> 0.6, 0.6, wgrad conv3_2 0.7, 0.7 -> 0.5, 0.6
    cur = -1
    run = 0
    for r in range(req_sm.shape[0]):
        k = req_sm[r]
        if k == cur:
            run += 1
        else:
            if cur >= 0:
                starts[cur + 1] += run
            cur = k
            run = 1
    if cur >= 0:
        starts[cur + 1] += run
    for k in range(nsms):
        starts[k + 1] += starts[k]
    cur = -1
    p = 0
    for r in range(req_sm.shape[0]):
        k = req_sm[r]
        if k != cur:
            if cur >= 0:
                starts[cur] = p
            cur = k
            p = starts[k]
        reqs[p] = (req_first[r] << 20) | (req_count[r] << 4) | (req_kind[r] << 2) | req_op[r]
        p += 1
    if cur >= 0:
        starts[cur] = p
    for k in range(nsms, 0, -1):
        starts[k] = starts[k - 1]
    starts[0] = 0


@njit(cache=True, _nrt=False, inline="always")
def _l1_sm_loop(l1, g1, l1c, sm, starts, reqs, sectors, keys, hist, count, l1_line, l1_sec, l1_mask, l2_line,
                slices, xor_hash, pow2, kind, lmap):
    """``_l1_sm``'s loop, with the shifts, the slice hash and the L1 index kind as arguments (constants
    where ``_l1_sm`` passes constants). Indices go through ``_U``: signed ones made Numba emit
    negative-index wraparound code on every access."""
    table, rec, sline, lru, last = _cache_rows(l1, sm)
    sets, ways, sbits = g1[0], g1[1], g1[3]
    hist0 = hist[0]
    counts = l1c[sm]
    _map_lines(lmap, sline, True)
    last_line, last_slot = last[0], last[1]        # kept in registers for the run, stored after it
    for j in range(starts[sm], starts[sm + 1]):
        q = reqs[_U(j)]
        first = q >> 20
        n = (q >> 4) & 0xFFFF
        base = _l1_counter(q)
        lookup = _looks_up_l1(q)
        _count_request(counts, base, n)
        misses = 0
        for i in range(first, first + n):
            a = sectors[_U(i)]
            if lookup:
                line = a >> l1_line
                o, last_line, last_slot = _access_mapped(lmap, rec, sline, lru, last_line, last_slot, line,
                                                         _set_of(line, sets, kind, sbits), (a >> l1_sec) & l1_mask,
                                                         False, ways)
                if o & 3 == 0:
                    keys[_U(i)] = -1
                    continue
                misses += 1
            sl = _slice_of(a >> l2_line, slices, xor_hash, pow2)
            keys[_U(i)] = sl
            if count:
                hist0[_U(sl)] += 1
        if lookup:
            counts[_U(base + 2)] += n - misses
            counts[_U(base + 3)] += misses
    last[0], last[1] = last_line, last_slot
    _map_lines(lmap, sline, False)


@njit(cache=True, _nrt=False)
def _l1_sm(l1, g1, l1c, sm, starts, reqs, sectors, shifts, slices, xor_hash, keys, hist, count, lmap, other, generic):
    """SM ``sm``'s requests (bucket ``sm`` of ``reqs``, see ``_bucket_requests``) through its L1, in
    issue order.

    ``keys[i]`` = the L2 slice sector ``i`` goes to, -1 for an L1 load hit. With ``count`` (serial
    path only: the row is shared), ``hist[0, slice]`` also counts the L2-bound sectors per slice.
    Nothing else is written per sector: the phase's streamed bytes compete for the CPU's L1d with the
    SM's cache state (see the module docstring).

    The loop (``_l1_sm_loop``, inlined) is compiled three times: with the common geometry as
    constants (128-byte lines, 32-byte sectors, linear power-of-two L1 sets, xor slice hash: every GPU
    in ``simcore.gpus``), once for a power-of-two slice count (p100, v100) and once for any other
    (titanxp, a100, h100, h200; on h100 conv2_2 the L1 phase took 12.9 against 14.4 ns with the
    generic copy, medians of four alternating runs), and with everything read at run time. The phase
    is bound by instruction count, not by memory (see the module docstring), and the constants
    take the shift and index-kind loads, branches and register spills out of every access.

    Which copy runs is ``_l1_variant``'s (``other``, ``generic``), each None or 1, computed once per
    hierarchy: Numba drops the branches that test an argument that is None before typing, so a
    hierarchy of the common geometry with a power-of-two slice count (None, None) compiles one copy of
    the loop instead of three (the first run's compilation of this kernel: 4.4 -> 1.6 s, under load),
    the other geometries two."""
    if starts[sm] == starts[sm + 1]:
        return
    if generic is None:
        if other is None:
            _l1_sm_loop(l1, g1, l1c, sm, starts, reqs, sectors, keys, hist, count, 7, 5, 3, 7, slices, True, True,
                        0, lmap)
        else:
            _l1_sm_loop(l1, g1, l1c, sm, starts, reqs, sectors, keys, hist, count, 7, 5, 3, 7, slices, True, False,
                        0, lmap)
    else:
        _l1_sm_loop(l1, g1, l1c, sm, starts, reqs, sectors, keys, hist, count, shifts[0], shifts[1], shifts[2],
                    shifts[3], slices, xor_hash, slices & (slices - 1) == 0, g1[2], lmap)


def _l1_variant(shifts, slices, xor_hash, g1):
    """(``other``, ``generic``) of ``_l1_sm`` for a hierarchy: (None, None) for the common geometry
    (128-byte lines, 32-byte sectors, linear power-of-two L1 sets, xor slice hash) with a power-of-two
    slice count, (1, None) for it with another slice count, (None, 1) otherwise."""
    common = (int(shifts[0]) == 7 and int(shifts[1]) == 5 and int(shifts[2]) == 3 and int(shifts[3]) == 7
              and bool(xor_hash) and int(g1[2]) == 0)
    if not common:
        return None, 1
    return (None, None) if slices & (slices - 1) == 0 else (1, None)


@njit(cache=True, _nrt=False)
def _count_part(keys, req_first, req_count, r0, r1, hist, t):
    """``hist[t, k]`` = L2-bound sectors of slice ``k`` in requests ``r0 .. r1 - 1``."""
    for k in range(hist.shape[1]):
        hist[t, k] = 0
    prev = -1                                   # runs of one slice are counted in a register
    run = 0
    for r in range(r0, r1):
        for i in range(req_first[r], req_first[r] + req_count[r]):
            k = keys[i]
            if k >= 0:
                if k == prev:
                    run += 1
                else:
                    if prev >= 0:
                        hist[t, prev] += run
                    prev = k
                    run = 1
    if prev >= 0:
        hist[t, prev] += run


@njit(cache=True, _nrt=False)
def _scatter_part(keys, sectors, req_op, req_kind, req_first, req_count, r0, r1, hist, t, packed, shifts,
                  slices, slice_shift, g2):
    """Requests ``r0 .. r1 - 1``'s L2-bound sectors, in issue order, to their slices' buckets, as
    key << _PACK_LINE | set << 6 | is_store << 5 | operand << 3 | sector (see ``_l2_key_set``); every
    kind but a store (1) reads."""
    l2_line, l2_sec, l2_mask = shifts[3], shifts[4], shifts[5]
    sets, kind, sbits = g2[0], g2[2], g2[3]
    pos = hist[t]
    # the line's (key, set) and the slice's next position are kept for runs of one line / one slice
    # (a request's sectors mostly share a line): no division by a slice count that is not a power of
    # two, and no store-to-load chain through pos, per sector. Measured (bench_phases.py, one thread,
    # batch 2, two runs alternating with the per-sector version), ns per L1 load sector: wgrad conv3_2
    # 4.7, 4.8 -> 3.1, 3.2; fprop conv2_2 3.7 -> 3.7; dgrad conv1_1 2.6, 2.8 -> 2.7, 2.8; a100 fprop
    # conv3_2 (a slice change at nearly every sector of A's one-sector rows) 3.1 -> 3.4, 3.5, but the
    # whole a100 fprop vgg16 batch 4 on 2 threads 1.60, 1.61 -> 1.56, 1.62 s; vgg16 training step at
    # batch 8 (2 threads, as bench_traces.py --train runs it): (fprop + dgrad + wgrad) / fprop 2.97,
    # 2.94 -> 2.87, 2.81. _count_part counts runs of one slice the same way.
    last_line = -1
    key = 0
    s = 0
    cur = -1
    p = 0
    for r in range(r0, r1):
        tail = _WRITE_BIT[req_kind[_U(r)]] | (req_op[_U(r)] << 3)
        first = req_first[_U(r)]
        for i in range(first, first + req_count[_U(r)]):
            k = keys[_U(i)]
            if k >= 0:
                a = sectors[_U(i)]
                line = a >> l2_line
                if line != last_line:
                    key, s = _l2_key_set(line, slices, slice_shift, sets, kind, sbits)
                    last_line = line
                if k != cur:
                    if cur >= 0:
                        pos[_U(cur)] = p
                    cur = k
                    p = pos[_U(k)]
                packed[_U(p)] = (key << _PACK_LINE) | (s << 6) | tail | ((a >> l2_sec) & l2_mask)
                p += 1
    if cur >= 0:
        pos[_U(cur)] = p


@njit(cache=True, _nrt=False)
def _offsets(hist, starts):
    """Bucket starts, and each part's first position in each bucket (in place in ``hist``)."""
    pos = 0
    for k in range(hist.shape[1]):
        starts[k] = pos
        for t in range(hist.shape[0]):
            c = hist[t, k]
            hist[t, k] = pos
            pos += c
    starts[hist.shape[1]] = pos


@njit(cache=True, _nrt=False)
def _l2_bucket_counted(keys, sectors, req_op, req_kind, req_first, req_count, hist, starts, packed, shifts,
                       slices, slice_shift, g2):
    """Stable bucketing of the L2-bound sectors by slice (serial path; the L1 phase has already counted
    ``hist[0]``): ``packed[starts[k]:starts[k+1]]`` = slice ``k``'s sectors in issue order. Copying
    them (rather than indexing the chunk from the slice loop) keeps the L2 phase's reads sequential:
    gathering from the whole chunk cost about 60 ns per L2 access in cache misses (measured, v100
    geometry, 1.7 M-sector chunk)."""
    _offsets(hist, starts)
    _scatter_part(keys, sectors, req_op, req_kind, req_first, req_count, 0, req_op.shape[0], hist, 0, packed,
                  shifts, slices, slice_shift, g2)


@njit(cache=True, parallel=True)
def _l2_bucket_parallel(keys, sectors, req_op, req_kind, req_first, req_count, hist, starts, packed, shifts,
                        slices, slice_shift, g2):
    """``_l2_bucket_counted`` as a parallel stable counting sort over ``hist.shape[0]`` request ranges,
    each range counting its own row of ``hist``."""
    n = req_op.shape[0]
    parts = hist.shape[0]
    for t in prange(parts):
        # np.int64(t): the prange index is typed uint64 in the parallel body and int64 in the serial
        # typing before it, which compiled _count_part and _scatter_part twice (compile time only)
        _count_part(keys, req_first, req_count, n * t // parts, n * (t + 1) // parts, hist, np.int64(t))
    _offsets(hist, starts)
    for t in prange(parts):
        _scatter_part(keys, sectors, req_op, req_kind, req_first, req_count, n * t // parts, n * (t + 1) // parts,
                      hist, np.int64(t), packed, shifts, slices, slice_shift, g2)


@njit(cache=True, _nrt=False)
def _l2_slice(l2, ways, tags, l2c, sl, starts, packed, spl, lmap):
    """Slice ``sl``'s L2-bound sectors (bucket ``sl`` of ``packed``, each with its key and its set, see
    ``_scatter_part``), in issue order, through ``_access_mapped``."""
    if starts[sl] == starts[sl + 1]:
        return
    table, rec, sline, lru, last = _cache_rows(l2, sl)
    tags_sl, counts = tags[sl], l2c[sl]
    _map_lines(lmap, sline, True)
    set_mask = (1 << (_PACK_LINE - 6)) - 1
    last_key, last_slot = last[0], last[1]          # kept in registers for the run, stored after it
    for j in range(starts[sl], starts[sl + 1]):
        p = packed[_U(j)]
        sector = p & 7
        write = (p & 32) != 0
        o, last_key, last_slot = _access_mapped(lmap, rec, sline, lru, last_key, last_slot, p >> _PACK_LINE,
                                                (p >> 6) & set_mask, sector, write, ways)
        _l2_count(o, tags_sl, counts, sector, write, (p >> 3) & 3, spl)
    last[0], last[1] = last_key, last_slot
    _map_lines(lmap, sline, False)


@njit(cache=True, _nrt=False)
def _l1_phase_serial(l1, g1, l1c, sms, starts, reqs, sectors, shifts, slices, xor_hash, keys, hist, maps, other,
                     generic):
    """All SMs in turn; also counts the L2-bound sectors per slice into ``hist[0]``. ``maps[0]``: the
    line -> slot map, -1 everywhere (and again on return). ``other``, ``generic``: ``_l1_variant``'s."""
    for k in range(hist.shape[1]):
        hist[0, k] = 0
    for sm in range(sms):
        _l1_sm(l1, g1, l1c, sm, starts, reqs, sectors, shifts,
               slices, xor_hash, keys, hist, True, maps[0], other, generic)


@njit(cache=True, parallel=True)
def _l1_phase_parallel(l1, g1, l1c, order, starts, reqs, sectors, shifts, slices, xor_hash, keys, hist, maps, other,
                       generic):
    """The SMs ``order`` lists (those with requests: see ``_busy``) in parallel, each thread with its
    own row of ``maps``."""
    for t in prange(order.shape[0]):
        _l1_sm(l1, g1, l1c, order[t], starts, reqs, sectors, shifts,
               slices, xor_hash, keys, hist, False, maps[get_thread_id()], other, generic)


@njit(cache=True)
def _l2_phase_serial(l2, ways, tags, l2c, slices, starts, packed, spl, maps):
    for sl in range(slices):
        _l2_slice(l2, ways, tags, l2c, sl, starts, packed, spl, maps[0])


@njit(cache=True, parallel=True)
def _l2_phase_parallel(l2, ways, tags, l2c, order, starts, packed, spl, maps):
    """The slices ``order`` lists (those with sectors: see ``_busy``) in parallel."""
    for t in prange(order.shape[0]):
        _l2_slice(l2, ways, tags, l2c, order[t], starts, packed, spl, maps[get_thread_id()])


@njit(cache=True)
def _dirty_by_operand(rec, tags, spl):
    """Dirty sectors still in L2 per operand tag."""
    out = np.zeros(3, np.int64)
    for c in range(rec.shape[0]):
        for slot in range(rec.shape[1] // 4):
            d = (rec[c, slot * 4 + 3] >> 8) & 255
            k = 0
            while d:
                if d & 1:
                    out[tags[c, slot * spl + k]] += 1
                d >>= 1
                k += 1
    return out
