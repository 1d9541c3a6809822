"""Exact sectored, set-associative LRU cache (DESIGN section 4), Numba-compiled.

Public API
----------
``simulate_trace(addresses, config, writes=None) -> CacheStats``
    Run one cache level, starting empty, over a 1-D array of byte addresses (each access is one
    sector). ``writes[i]`` true makes access ``i`` a write: write-back, write-allocate *without*
    fetch (the sector becomes valid and dirty; a write to a valid sector is a write hit).

Semantics (DESIGN section 4): ``line = addr // line_bytes``,
``sector = (addr % line_bytes) // sector_bytes``. A read with a tag hit on a valid sector is a hit;
a tag hit on an invalid sector is a *sector miss* (the sector is filled); a tag miss evicts the LRU
line of the set if the set is full (its dirty sectors are written below: ``dirty_evictions``) and
allocates the line with only that sector valid. LRU order is per line and updated by every access
to any of its sectors. Set index: ``linear``: ``line mod sets``; ``xor``:
``(line ^ line >> b ^ line >> 2b) & (sets - 1)`` with ``b = log2(sets)``.

Implementation: the state of C identical caches is one *bank*, the tuple
``(table, rec, sline, lru, last)`` of 2-D arrays with one row per cache (see ``_new_bank``), so that
the hierarchy reuses the very same access kernel ``_access`` for 80 L1s or 64 L2 slices. The kernel
takes one cache's rows (1-D views, made once per SM or slice by the caller), never the whole bank:
indexing ``[cache, ...]`` inside the access kept the row strides and the cache number live in the
hot loop and spilled registers. With rows, on vgg16 conv2_2 (``benchmarks/bench_phases.py --reps 2``,
six runs alternating with the code before the change, ns per L1 load sector, medians): L1 phase
16.8 -> 12.4, L2 phase 11.4 -> 8.9, all phases 36.4 -> 28.3 (each of the six pairs faster, by 7 to
33 %). Per cache:

* an open-addressing hash table ``line -> slot`` (slot numbers compared through ``sline``;
  Fibonacci hash, linear probing, backward-shift deletion, capacity the power of two >= 4x lines),
  so a lookup is O(1) whatever the associativity;
* one record per slot, ``rec[4 slot : 4 slot + 4] = (prev, next, table position, valid | dirty << 8)``:
  an intrusive doubly-linked LRU list per set (``lru[3 set : 3 set + 3] = (head, tail, used)``), so
  move-to-front and eviction are O(1); set ``s`` owns slots ``s*ways .. s*ways+ways-1``; the stored
  table position makes deletion probe-free, and a miss inserts at the empty position its lookup
  ended on before deleting the victim (no second probe);
* the last line looked up and its slot: an access to the same line as the previous access of this
  cache needs neither a hash probe nor an LRU update (the line is already its set's MRU). Sector
  streams touch the sectors of a line back to back, so this is a common case.

The hierarchy's bucketed phases use ``_access_mapped`` instead: the same slots, records and LRU
lists, but the line's slot comes from an exact line -> slot map that the caller fills for the one
cache at work (see ``simcore._phases``), so a lookup is one load and a miss two stores, with no
hash, probe or backward-shift deletion. Both share the list and sector code (``_allocate``,
``_install``, ``_to_front``, ``_sector_access``); ``_rebuild_tables`` refills the hash tables from
the slots' lines when a hierarchy goes back to ``_access``.

Measured (2-core AMD EPYC development VM, benchmarks/bench_simcore.py, conv-like stream, 128 KB
256-way cache, 1.7 M lookups; the machine was shared, numbers +-20 %): a scan-and-shift MRU array
gets ~17 M lookups/s (DESIGN section 8). Passing the bank tuple into NRT-enabled kernels: 11 M/s
(atomic refcounts per access). Separate arrays + ``_nrt=False``: 55 M/s. Slot records + probe-free
deletion + insert-before-delete: 80-85 M/s. int32 table (64 KB int64 key/slot table did not fit the
32 KB L1d): ~100 M/s. Table load factor 1/2: -10 %, 1/8: -20 % against 1/4. Branch-free outcome
counting: -10 % (kept the branches). No fastmath (integer code).

Slot numbers, table positions and LRU links are int16 where they fit (``_small_ints``: tables of at
most 2**15 positions, i.e. caches of at most 8192 lines), int32 above. For the hierarchy's 80 L1s of
768 lines this halves each cache's state (34 KB -> 17 KB), nearer the CPU's 32 KB L1d: on vgg16
conv2_2 (v100, one thread, best of 5, the phase timing of ``benchmarks/bench_phases.py``) the L1 phase went
22.8 -> 18.1 ns and the L2 phase 13.2 -> 8.7 ns per access. One cache alone (``simulate_trace``, its
state always hot) first measured ~15 % slower with int16 (not confirmed later, see below), so the
benchmark above is no guide here. Where the L1
time goes (perf, cpu-clock samples on conv2_2, where every L1 lookup is a tag miss): waiting for
the LRU victim's record and its table neighbourhood, last touched a whole LRU cycle (768 lookups,
~20 KB of streamed chunk data) earlier. Tried and dropped: software prefetch (``llvm.prefetch``) of
the next two victims' records and table positions at each eviction: no measurable change; an LRU kept
as a per-set recency log with lazy deletion instead of linked lists: L1 phase 18 -> 25 ns.

Bounds, after the switch to row views (conv2_2, ``bench_phases.py``, ns per L1 load sector, each a
deliberately wrong variant timed once for scale): the L1 phase's loop with no cache access at all
3-3.8; FIFO replacement and no hash table 7; FIFO with the hash table 10-11; the real LRU 11-11.8.
So the hash table costs ~3 ns and the LRU lists ~1, and no change to either alone can halve the phase.
Also tried then, A/B against the unchanged code in alternating runs (``bench_phases.py --reps 3``, best
of 3-4 runs each), none kept: a circular LRU list, where an eviction is a rotation of the head (L1 12.5
vs 11.4 ns; re-tested with six alternating runs of ``--reps 2``: all phases 34.3 vs 35.2 ns, paired
ratio 0.99: no gain); 32-bit ``sline`` (no change); ``sline`` inside each slot's record, one CPU cache
line per slot instead of two (11.8 vs 10.9 ns, 12.2 vs 13.4 in another run: noise); no
same-line-as-last shortcut (L2 8.9 vs 8.2 ns); the L2 phase's per-operand counters kept in packed
registers instead of memory (L2 9.8 vs 8.1 ns); and, for L2 slices, a set-associative tag scan with LRU
time stamps instead of the hash table and lists (``/tmp`` scratch; counts identical, but Numba's LLVM
turns the 32-way compare into gathers or scalar code, not a vector compare: 15-18 vs 8 ns). int32
state for ``simulate_trace``'s single cache (the ~15 % above): 51-93 vs 90-123 M/s in four alternating
runs of ``bench_simcore.py``, no gain, so one cache keeps int16 as well.
"""
from __future__ import annotations

import numpy as np
from ._jit import njit

from .config import CacheConfig, CacheStats

_U = np.uint64    # index casts: unsigned indices skip Numba's negative-index wraparound code

# Fibonacci hashing multiplier 0x9E3779B97F4A7C15 as a (wrapping) int64.
_HASH_MUL = np.int64(-7046029254386353131)
_POPCOUNT8 = np.array([bin(i).count("1") for i in range(256)], dtype=np.int64)

# hash table capacity: the power of two >= _TABLE_LOAD x lines (load factor <= 1/_TABLE_LOAD)
_TABLE_LOAD = 4

# index kinds (geometry tuple field)
_IDX_LINEAR_POW2 = 0
_IDX_LINEAR_MOD = 1
_IDX_XOR = 2

# outcome codes (low 2 bits of _access's result)
HIT = 0
SECTOR_MISS = 1
TAG_MISS = 2


def _geometry(config: CacheConfig):
    """(sets, ways, index kind, log2 sets, hash shift, hash mask) as a tuple of ints."""
    sets, ways = config.sets, config.ways
    if config.index == "xor":
        kind = _IDX_XOR
    elif sets & (sets - 1) == 0:
        kind = _IDX_LINEAR_POW2
    else:
        kind = _IDX_LINEAR_MOD
    cap_bits = max(2, (_TABLE_LOAD * sets * ways - 1).bit_length())
    return (np.int64(sets), np.int64(ways), np.int64(kind), np.int64(sets.bit_length() - 1),
            np.int64(64 - cap_bits), np.int64((1 << cap_bits) - 1))


def _small_ints(config: CacheConfig):
    """Integer type of a bank's slot numbers and table positions: int16 when they fit, else int32.
    int16 halves the per-cache state (v100 L1, 768 lines: 34 KB -> 17 KB, now within the CPU's 32 KB
    L1d with room for the streams); valid | dirty << 8 then sets the sign bit for an 8-sector line, so
    readers mask with 255."""
    cap = int(_geometry(config)[5]) + 1
    return np.int16 if max(cap, config.lines) <= 1 << 15 else np.int32


def _new_bank(config: CacheConfig, count: int):
    """State of ``count`` empty caches of geometry ``config``: a tuple of arrays (see module doc)."""
    lines = config.lines
    cap = int(_geometry(config)[5]) + 1
    small = _small_ints(config)
    table = np.full((count, cap), -1, small)           # slot holding the line hashed here, -1 = empty
    rec = np.full((count, lines * 4), -1, small)       # per slot: prev, next, table pos, valid | dirty << 8
    rec[:, 3::4] = 0
    lru = np.full((count, config.sets * 3), -1, small)  # per set: head (MRU slot), tail (LRU), slots used
    lru[:, 2::3] = 0
    sline = np.full((count, lines), -1, np.int64)      # line held by each slot
    last = np.full((count, 2), -1, np.int64)           # (last line looked up, its slot)
    return table, rec, sline, lru, last


@njit(cache=True, _nrt=False, inline="always")
def _cache_rows(bank, c):
    """Cache ``c``'s rows of a bank: ``(table, rec, sline, lru, last)``, what ``_access`` takes."""
    return bank[0][c], bank[1][c], bank[2][c], bank[3][c], bank[4][c]


@njit(cache=True, _nrt=False, inline="always")
def _set_of(line, sets, kind, sbits):
    if kind == 0:
        return line & (sets - 1)
    if kind == 1:
        return line % sets
    return (line ^ (line >> sbits) ^ (line >> (2 * sbits))) & (sets - 1)


@njit(cache=True, _nrt=False, inline="always")
def _home(line, hshift, hmask):
    """Hash table position where the probe for ``line`` starts (Fibonacci hashing)."""
    return ((line * _HASH_MUL) >> hshift) & hmask


@njit(cache=True, _nrt=False, inline="always")
def _ht_delete(table, rec, sline, i, hshift, hmask):
    """Empty table position ``i``; backward-shift the rest of its probe run."""
    j = i
    while True:
        j = (j + 1) & hmask
        slot = table[_U(j)]
        if slot < 0:
            break
        home = _home(sline[_U(slot)], hshift, hmask)
        # the key at j stays if its home lies cyclically in (i, j]; else it moves back to the hole i
        if i <= j:
            stays = i < home <= j
        else:
            stays = home > i or home <= j
        if stays:
            continue
        table[_U(i)] = slot
        rec[_U(slot * 4 + 2)] = i
        i = j
    table[_U(i)] = -1


@njit(cache=True, _nrt=False, inline="always")
def _allocate(rec, lru, s, ways):
    """A slot of set ``s`` for a new line: the set's next unused slot, else its LRU slot, unlinked
    from the list. Returns (slot, the evicted line's dirty sector mask, whether a line was evicted)."""
    used = lru[_U(s * 3 + 2)]
    if used < ways:
        lru[_U(s * 3 + 2)] = used + 1
        return s * ways + used, 0, False
    slot = lru[_U(s * 3 + 1)]
    t = rec[_U(slot * 4 + 0)]
    lru[_U(s * 3 + 1)] = t
    if t >= 0:
        rec[_U(t * 4 + 1)] = -1
    else:
        lru[_U(s * 3 + 0)] = -1
    return slot, (rec[_U(slot * 4 + 3)] >> 8) & 255, True


@njit(cache=True, _nrt=False, inline="always")
def _install(rec, lru, sline, slot, s, line, bit, write):
    """Put ``line`` in the unlinked ``slot`` as its set's MRU line, with only sector ``bit`` valid."""
    h = lru[_U(s * 3 + 0)]
    rec[_U(slot * 4 + 0)] = -1
    rec[_U(slot * 4 + 1)] = h
    if h >= 0:
        rec[_U(h * 4 + 0)] = slot
    else:
        lru[_U(s * 3 + 1)] = slot
    lru[_U(s * 3 + 0)] = slot
    sline[_U(slot)] = line
    rec[_U(slot * 4 + 3)] = bit | (bit << 8) if write else bit


@njit(cache=True, _nrt=False, inline="always")
def _to_front(rec, lru, slot, s):
    """Move the resident line in ``slot`` to the front of its set ``s``'s LRU list."""
    h = lru[_U(s * 3 + 0)]
    if h != slot:                            # unlink, push to the front of the set's LRU list
        p = rec[_U(slot * 4 + 0)]
        n = rec[_U(slot * 4 + 1)]
        rec[_U(p * 4 + 1)] = n
        if n >= 0:
            rec[_U(n * 4 + 0)] = p
        else:
            lru[_U(s * 3 + 1)] = p
        rec[_U(slot * 4 + 0)] = -1
        rec[_U(slot * 4 + 1)] = h
        rec[_U(h * 4 + 0)] = slot
        lru[_U(s * 3 + 0)] = slot


@njit(cache=True, _nrt=False, inline="always")
def _sector_access(rec, slot, bit, write):
    """The sector ``bit`` of the resident line in ``slot``: slot << 10 | HIT or SECTOR_MISS."""
    v = rec[_U(slot * 4 + 3)]
    if write:
        v |= bit << 8
    if v & bit:
        rec[_U(slot * 4 + 3)] = v
        return slot << 10
    rec[_U(slot * 4 + 3)] = v | bit
    return (slot << 10) | 1


@njit(cache=True, _nrt=False, inline="always")
def _access(table, rec, sline, lru, last, line, s, sector, write, ways, hshift, hmask):
    """One sector access of one cache (its rows of a bank's arrays; ``s``: the set of ``line``): returns
    slot << 10 | evicted dirty mask << 2 | outcome.

    The bank's arrays are passed one by one and the kernels run without Numba's reference counting
    (``_nrt=False``; they allocate nothing): passing the bank tuple to an NRT-enabled kernel cost an
    atomic incref/decref per array per access (11 M lookups/s instead of > 100 M, measured)."""
    bit = 1 << sector
    if last[0] == line:                       # same line as this cache's previous access: MRU already
        slot = last[1]
    else:
        i = _home(line, hshift, hmask)
        while True:
            slot = table[_U(i)]
            if slot < 0 or sline[_U(slot)] == line:
                break
            i = (i + 1) & hmask
        if slot < 0:                          # tag miss; i: the empty position the lookup ended on
            slot, evicted, full = _allocate(rec, lru, s, ways)
            if full:
                old = rec[_U(slot * 4 + 2)]
                table[_U(i)] = slot           # insert before deleting: i stays valid, no re-probe
                rec[_U(slot * 4 + 2)] = i
                sline[_U(slot)] = line
                _ht_delete(table, rec, sline, old, hshift, hmask)
            else:
                table[_U(i)] = slot
                rec[_U(slot * 4 + 2)] = i
            _install(rec, lru, sline, slot, s, line, bit, write)
            last[0] = line
            last[1] = slot
            return (slot << 10) | (evicted << 2) | 2
        _to_front(rec, lru, slot, s)
        last[0] = line
        last[1] = slot
    return _sector_access(rec, slot, bit, write)


@njit(cache=True, _nrt=False, inline="always")
def _access_mapped(lmap, rec, sline, lru, last_line, last_slot, line, s, sector, write, ways):
    """``_access`` with an exact map instead of the hash table: ``lmap[line]`` is the slot of every
    line this cache holds and -1 for every other (the hierarchy fills it from ``sline`` before a run
    of one cache's accesses and clears it after, see ``simcore._phases``). No hashing, probing or
    backward-shift deletion; the hash table and the table positions in ``rec`` are left stale.
    The cache's previous line and slot come in as ``last_line, last_slot`` (the caller keeps them in
    registers for its run, not in ``last``); returns ``_access``'s result and the new pair."""
    bit = 1 << sector
    if line == last_line:
        return _sector_access(rec, last_slot, bit, write), last_line, last_slot
    slot = lmap[_U(line)]
    if slot < 0:
        slot, evicted, full = _allocate(rec, lru, s, ways)
        if full:
            lmap[_U(sline[_U(slot)])] = -1
        lmap[_U(line)] = slot
        _install(rec, lru, sline, slot, s, line, bit, write)
        return (slot << 10) | (evicted << 2) | 2, line, slot
    _to_front(rec, lru, slot, s)
    return _sector_access(rec, slot, bit, write), line, slot


@njit(cache=True, _nrt=False)
def _rebuild_tables(bank, geo):
    """Refill every cache's hash table (and the table positions in ``rec``) from ``sline``: the
    hierarchy calls it before an ``_access`` run that follows ``_access_mapped`` runs."""
    table, rec, sline = bank[0], bank[1], bank[2]
    hshift, hmask = geo[4], geo[5]
    for c in range(table.shape[0]):
        table[c, :] = -1
        for slot in range(sline.shape[1]):
            line = sline[c, slot]
            if line < 0:
                continue
            i = _home(line, hshift, hmask)
            while table[c, i] >= 0:
                i = (i + 1) & hmask
            table[c, i] = slot
            rec[c, slot * 4 + 2] = i


@njit(cache=True, _nrt=False)
def _run_trace(bank, geo, addresses, writes, line_shift, sector_shift, sector_mask, out):
    """simulate_trace's loop; ``out`` = [hits, tag misses, read hits, writes, write hits, dirty evictions]."""
    table, rec, sline, lru, last = _cache_rows(bank, 0)
    sets, ways, kind, sbits, hshift, hmask = geo
    has_writes = writes.shape[0] > 0
    hits = tag_misses = read_hits = nwrites = write_hits = dirty_ev = 0
    for i in range(addresses.shape[0]):
        a = addresses[i]
        w = has_writes and writes[i]
        line = a >> line_shift
        r = _access(table, rec, sline, lru, last, line, _set_of(line, sets, kind, sbits), (a >> sector_shift) & sector_mask,
                    w, ways, hshift, hmask)
        outcome = r & 3
        if outcome == 0:
            hits += 1
            if w:
                write_hits += 1
        elif outcome == 2:
            tag_misses += 1
            dirty_ev += _POPCOUNT8[(r >> 2) & 255]
        nwrites += w
    read_hits = hits - write_hits
    out[0] = hits
    out[1] = tag_misses
    out[2] = read_hits
    out[3] = nwrites
    out[4] = write_hits
    out[5] = dirty_ev


@njit(cache=True)
def _dirty_sectors(rec):
    """Dirty sectors per cache of a bank's ``rec`` array."""
    out = np.zeros(rec.shape[0], np.int64)
    for c in range(rec.shape[0]):
        total = 0
        for slot in range(rec.shape[1] // 4):
            total += _POPCOUNT8[(rec[c, slot * 4 + 3] >> 8) & 255]
        out[c] = total
    return out


def _check_addresses(addresses, name="addresses") -> np.ndarray:
    """A 1-D int64 array of non-negative addresses, or TypeError/ValueError naming ``name``."""
    if not isinstance(addresses, np.ndarray):
        if isinstance(addresses, (str, bytes)) or not hasattr(addresses, "__len__"):
            raise TypeError(f"{name} must be a 1-D integer array, got {type(addresses).__name__}")
        addresses = np.asarray(addresses)
        if addresses.size == 0:
            addresses = addresses.astype(np.int64)
    if addresses.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {addresses.shape}")
    if addresses.dtype.kind not in "iu":
        raise TypeError(f"{name} must have an integer dtype, got {addresses.dtype}")
    if addresses.size:
        if addresses.dtype.kind == "i" and addresses.min() < 0:
            raise ValueError(f"{name} must be non-negative, got {int(addresses.min())}")
        if addresses.dtype.kind == "u" and int(addresses.max()) > np.iinfo(np.int64).max:
            raise ValueError(f"{name} must be below 2**63, got {int(addresses.max())}")
    return np.ascontiguousarray(addresses, dtype=np.int64)


def _check_flags(flags, length: int, name: str) -> np.ndarray:
    """A 1-D bool array of ``length`` (bool, or integers 0/1), or TypeError/ValueError naming ``name``."""
    if not isinstance(flags, np.ndarray):
        if isinstance(flags, (str, bytes)) or not hasattr(flags, "__len__"):
            raise TypeError(f"{name} must be a 1-D boolean array, got {type(flags).__name__}")
        flags = np.asarray(flags)
        if flags.size == 0:
            flags = flags.astype(bool)
    if flags.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {flags.shape}")
    if flags.shape[0] != length:
        raise ValueError(f"{name} has length {flags.shape[0]}, expected {length} (one per address)")
    if flags.dtype.kind in "iu":
        if flags.size and (flags.min() < 0 or flags.max() > 1):
            raise ValueError(f"{name} must be boolean (0/1), got values in [{flags.min()}, {flags.max()}]")
    elif flags.dtype.kind != "b":
        raise TypeError(f"{name} must be a boolean array, got dtype {flags.dtype}")
    return np.ascontiguousarray(flags, dtype=np.bool_)


def simulate_trace(addresses, config: CacheConfig, writes=None) -> CacheStats:
    """Simulate one sectored set-associative LRU cache, starting empty, over ``addresses``.

    Parameters
    ----------
    addresses : 1-D integer array
        Byte addresses, one sector access each, non-negative.
    config : CacheConfig
        Geometry (size, ways, line and sector size, index function).
    writes : 1-D bool array, optional
        Same length as ``addresses``; true marks a write (write-back, write-allocate without fetch).

    Returns
    -------
    CacheStats
        ``accesses, hits, misses`` (sector + tag misses), ``tag_misses``, read/write accesses and hits,
        ``dirty_evictions`` (dirty sectors written below on eviction), ``dirty_at_end``.
    """
    if not isinstance(config, CacheConfig):
        raise TypeError(f"config must be a CacheConfig, got {type(config).__name__}")
    addresses = _check_addresses(addresses)
    n = addresses.shape[0]
    if writes is None:
        flags = np.zeros(0, np.bool_)
    else:
        flags = _check_flags(writes, n, "writes")
    bank = _new_bank(config, 1)
    out = np.zeros(6, np.int64)
    line_shift = config.line_bytes.bit_length() - 1
    sector_shift = config.sector_bytes.bit_length() - 1
    _run_trace(bank, _geometry(config), addresses, flags, line_shift, sector_shift,
               config.sectors_per_line - 1, out)
    hits, tag_misses, read_hits, nwrites, write_hits, dirty_ev = (int(x) for x in out)
    return CacheStats(accesses=n, hits=hits, misses=n - hits, tag_misses=tag_misses,
                      read_accesses=n - nwrites, read_hits=read_hits, write_accesses=nwrites,
                      write_hits=write_hits, dirty_evictions=dirty_ev,
                      dirty_at_end=int(_dirty_sectors(bank[1])[0]))
