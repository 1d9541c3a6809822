"""Per-SM L1 caches and a sliced L2 (DESIGN section 4), fed chunk by chunk.

API
---
``Hierarchy(l1, sms, l2_slice, l2_slices, slice_hash="xor")``
    ``sms`` L1 caches of geometry ``l1`` (a ``CacheConfig``) and ``l2_slices`` L2 slices of geometry
    ``l2_slice``; ``slice_hash`` picks the slice of a line: ``"linear"``: ``line mod slices``;
    ``"xor"``: ``(line ^ line >> 7 ^ line >> 14) mod slices``. Within its slice a line's set is the
    slice's own index function of ``line // slices``. Both levels must use the same sector size. All
    caches start empty.
``Hierarchy.for_gpu(gpu, l1_config)``
    The L2 of ``gpu`` (``gpu.l2_slice_config()``, ``gpu.l2_slices``, ``gpu.l2_index``) with ``gpu.sms``
    L1s of geometry ``l1_config`` (e.g. ``gpu.l1_config(ctas_per_sm, smem_per_cta)``).
``h.feed(req_sm, req_operand, req_kind, req_first, req_count, sectors)``
    One chunk of warp-level requests in global issue order: request ``r`` comes from SM
    ``req_sm[r]``, operand ``req_operand[r]`` (0: A, 1: B, 2: C), is of kind ``req_kind[r]``, and
    touches the sectors ``sectors[req_first[r] : req_first[r] + req_count[r]]`` (byte addresses,
    multiples of the sector size). Kinds (``simcore.metrics.KIND_*``; a bool array reads as 0 / 1):
    0, a global load (``ld``): looks up L1[sm] once per sector; misses go to L2 as reads.
    1, a store: write-through, no-allocate: leaves L1 untouched and goes to L2 as writes
    (write-back, write-allocate without fetch: the sector becomes valid and dirty).
    2, ``cp.async.cg``: neither looks up nor changes L1[sm]; every sector goes to L2 as a read.
    3, ``cp.async.ca``: exactly a load (looks up and allocates in L1[sm]), counted under the ldgsts
    cache-access keys instead of the ``op_ld`` ones.
    Arrays may be reused by the caller after the call. Memory use is the cache state plus O(chunk)
    plus, per Numba thread, a line -> slot map of 2 bytes (4 for caches of over 8192 lines) per line
    below the highest address fed so far (e.g. 0.2 MB for vgg16 conv2_2 at batch 1, 13 MB for conv1_2
    at batch 32), up to ``_MAP_MAX_LINES`` lines; a chunk that reaches above that switches the
    hierarchy to hash tables in issue order for good (``_feed_serial``: same counts, ~3x slower).
``h._feed_unchecked(...)``
    ``feed`` minus the argument checks, for the trusted stream generator of ``traces.simulate_layer``
    (arrays already of the checked dtypes and ranges; see the method).
``h.metrics() -> dict[str, int]``
    Every key of ``simcore.metrics.METRICS``, totals and per operand (``:A``, ``:B``, ``:C``); the
    L1 keys of each kind as in ``simcore.metrics.KIND_KEYS`` (the ldgsts keys are 0 for a stream of
    loads and stores); the L2 read and the DRAM keys count the reads of every kind.
    A read miss in L2 is one DRAM read sector; a dirty sector evicted from L2 is one DRAM write
    sector, attributed to the operand of the last store that wrote it; dirty sectors still in L2
    are ``L2_DIRTY_AT_END`` (not DRAM writes). ``metrics()`` may be called at any time.
``h.parallel``
    ``True`` or ``False`` force the parallel or the serial path; ``None`` (default) decides: with more
    than one Numba thread, the first large chunks (>= 64 Ki sectors) alternate between the paths (one
    warm-up and two timed chunks each), and the faster one is kept (parallel loses when the machine's
    other cores are busy); the next 16 hierarchies of the same shape and thread count in the process
    reuse that verdict instead of probing again. Serial and parallel runs give identical counts.

The phases that do the work, and what was measured on them, are in ``simcore._phases``.
"""
from __future__ import annotations

import time

import numba
import numpy as np

from . import metrics as M
from ._phases import (_PACK_LINE, _bucket_requests, _dirty_by_operand, _feed_serial, _l1_phase_parallel,
                      _l1_phase_serial, _l1_variant, _l2_bucket_counted, _l2_bucket_parallel, _l2_phase_parallel,
                      _l2_phase_serial)
from .cache import _geometry, _new_bank, _rebuild_tables
from .config import CacheConfig, check_positive_int

# per-SM L1 counters [sm, (kind * 4 + operand) * 4 + k], k: the keys of M.KIND_KEYS[kind] (flat rows:
# no stride multiply in the loops; see _phases._l1_counter)
_L1_COUNTERS = 4 * 4 * 4
# per-slice L2 counters [slice, operand * 8 + k]
_L2_RD, _L2_RD_HIT, _L2_RD_MISS, _L2_WR, _L2_WR_HIT, _L2_WR_MISS, _DRAM_RD, _DRAM_WR = range(8)
_L2_KEYS = (M.L2_RD_SECTORS, M.L2_RD_HITS, M.L2_RD_MISSES, M.L2_WR_SECTORS, M.L2_WR_HITS,
            M.L2_WR_MISSES, M.DRAM_RD_SECTORS, M.DRAM_WR_SECTORS)

# Byte addresses must stay below this: the documented address range (the user half of a GPU's 48-bit
# virtual addresses).
_MAX_ADDRESS = 1 << 47
# The bucketed paths' line -> slot map covers lines below this (32 Mi lines: 4 GiB of addresses with
# 128-byte lines; 64 MiB per thread at 2 bytes per line), so a simulation's memory stays bounded
# whatever the layer; the L2 bucketing packs key << _PACK_LINE (key <= line) in an int64.
_MAP_MAX_LINES = 1 << (63 - _PACK_LINE)
# Bumped whenever a change alters simulated counts; cached simulation results carry it.
SIM_VERSION = 3


# Index ranges of the parallel L2 bucketing (handed out dynamically to the threads).
_BUCKET_PARTS = 8

# Below this many sectors per chunk the parallel path's bucketing is not worth it.
_PARALLEL_MIN_SECTORS = 1 << 16

# A probe: one chunk on each path to warm it up, then this many chunks on each, alternating; a path's
# time is its fastest timed chunk. One timed pair was too few on the 2-core development machine: a
# training step of vgg16 (batch 32) had one probe in conv1_1 time serial at 8.5 and parallel at 16.6 ns
# per sector (a noise spike: forced, that layer runs 0.26-0.39 s parallel against 0.35-0.40 s serial),
# and the serial verdict then held for the next 16 layers and passes.
_PROBE_TIMED = 2

# Serial-or-parallel verdicts of finished probes, per (Numba threads, SMs, L2 slices): (parallel?,
# how many more hierarchies may reuse it before one probes again, in case the machine's load changed).
_VERDICTS: dict = {}
_VERDICT_USES = 16


def _busy(starts):
    """Indices, ascending, of the non-empty buckets of ``starts`` (bucket k: ``starts[k]:starts[k+1]``).
    The parallel phases loop over these rather than over every SM or slice: with prange over all 80
    SMs, a layer that keeps only 8 or 28 SMs busy ran its L1 phase hardly faster on two threads than on
    one (vgg16 conv5_1: 12.9-20.7 vs 15.4-16.1 ns per sector; conv4_2: 8.3-11.8 vs 14.4-15.7); over its
    busy SMs alone, 7.9-10.7 and 6.8-7.7 (``/tmp`` scratch timing of the phase, best of 3). Busiest
    first instead of ascending was slower (conv4_2: 8.9-9.6 ns)."""
    return np.flatnonzero(np.diff(starts))


def _as_1d(value, name, kinds="iu"):
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{name} must be a numpy array, got {type(value).__name__}")
    if value.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {value.shape}")
    if value.dtype.kind not in kinds:
        raise TypeError(f"{name} must have an integer dtype, got {value.dtype}")
    return value


def _check_range(arr, name, lo, hi):
    """lo <= arr < hi (hi None: unbounded) else ValueError naming the array and the bad value.
    Returns the largest value (None for an empty array)."""
    if arr.size == 0:
        return None
    amin, amax = int(arr.min()), int(arr.max())
    if amin < lo:
        raise ValueError(f"{name} must be >= {lo}, got {amin}")
    if hi is not None and amax >= hi:
        raise ValueError(f"{name} must be < {hi}, got {amax}")
    return amax


class Hierarchy:
    """Per-SM sectored L1s + a sliced, sectored, write-back L2 (see the module docstring)."""

    def __init__(self, l1: CacheConfig, sms: int, l2_slice: CacheConfig, l2_slices: int,
                 slice_hash: str = "xor"):
        if not isinstance(l1, CacheConfig):
            raise TypeError(f"Hierarchy.l1 must be a CacheConfig, got {type(l1).__name__}")
        if not isinstance(l2_slice, CacheConfig):
            raise TypeError(f"Hierarchy.l2_slice must be a CacheConfig, got {type(l2_slice).__name__}")
        self.sms = check_positive_int("Hierarchy", "sms", sms)
        self.l2_slices = check_positive_int("Hierarchy", "l2_slices", l2_slices)
        if slice_hash not in ("xor", "linear"):
            raise ValueError(f"Hierarchy.slice_hash must be 'xor' or 'linear', got {slice_hash!r}")
        if l1.sector_bytes != l2_slice.sector_bytes:
            raise ValueError(f"Hierarchy: L1 sector_bytes={l1.sector_bytes} differs from L2 "
                             f"sector_bytes={l2_slice.sector_bytes}")
        if self.l2_slices > 16384:
            raise ValueError(f"Hierarchy.l2_slices must be <= 16384, got {self.l2_slices}")
        self.l1 = l1
        self.l2_slice = l2_slice
        self.slice_hash = slice_hash
        self.parallel = None
        self._probe = []                 # (mode, seconds per sector) of the first large chunks
        self._parallel_chosen = False
        self._slice_shift = (self.l2_slices.bit_length() - 1
                             if self.l2_slices & (self.l2_slices - 1) == 0 else -1)
        self._mode = "auto"          # tests: "issue" (one loop in issue order), "bucketed", "parallel"
        self._starts_sm = np.zeros(self.sms + 1, np.int64)
        self._starts_slice = np.zeros(self.l2_slices + 1, np.int64)
        self._keys = np.zeros(0, np.int16)
        self._packed = np.zeros(0, np.int64)
        self._hist = np.zeros((1, self.l2_slices), np.int64)
        self._reqs = np.zeros(0, np.int64)
        self._l1 = _new_bank(l1, self.sms)
        self._l2 = _new_bank(l2_slice, self.l2_slices)
        # line -> slot maps of the bucketed paths (a row per thread), -1 between phases; the hash
        # tables go stale while they are in use (see ``_feed_unchecked``)
        self._maps = np.zeros((0, 0), np.promote_types(self._l1[1].dtype, self._l2[1].dtype))
        self._hashed = False             # switched to hash tables for good (an address beyond the maps)
        self._tables_current = True      # hash tables match the cache contents
        self._g1 = np.array(_geometry(l1), np.int64)
        self._g2 = np.array(_geometry(l2_slice), np.int64)
        self._tags = np.zeros((self.l2_slices, l2_slice.lines * l2_slice.sectors_per_line), np.uint8)
        self._l1c = np.zeros((self.sms, _L1_COUNTERS), np.int64)   # [sm, (kind * 4 + operand) * 4 + k]
        self._l2c = np.zeros((self.l2_slices, 3 * 8), np.int64)   # [slice, operand * 8 + k]
        shift = lambda x: x.bit_length() - 1  # noqa: E731  (powers of two)
        self._shifts = np.array([shift(l1.line_bytes), shift(l1.sector_bytes), l1.sectors_per_line - 1,
                                 shift(l2_slice.line_bytes), shift(l2_slice.sector_bytes),
                                 l2_slice.sectors_per_line - 1], np.int64)
        self._l1_variant = _l1_variant(self._shifts, self.l2_slices, slice_hash == "xor", self._g1)

    @classmethod
    def for_gpu(cls, gpu, l1_config: CacheConfig) -> "Hierarchy":
        """``gpu.sms`` L1s of ``l1_config`` and ``gpu``'s sliced L2."""
        return cls(l1_config, gpu.sms, gpu.l2_slice_config(), gpu.l2_slices, gpu.l2_index)

    def __repr__(self):
        return (f"Hierarchy(l1={self.l1!r}, sms={self.sms}, l2_slice={self.l2_slice!r}, "
                f"l2_slices={self.l2_slices}, slice_hash={self.slice_hash!r})")

    def _check_feed(self, req_sm, req_operand, req_kind, req_first, req_count, sectors):
        req_sm = _as_1d(req_sm, "req_sm")
        req_operand = _as_1d(req_operand, "req_operand")
        req_kind = _as_1d(req_kind, "req_kind", "iub")
        req_first = _as_1d(req_first, "req_first")
        req_count = _as_1d(req_count, "req_count")
        sectors = _as_1d(sectors, "sectors")
        n = req_sm.shape[0]
        for name, arr in (("req_operand", req_operand), ("req_kind", req_kind),
                          ("req_first", req_first), ("req_count", req_count)):
            if arr.shape[0] != n:
                raise ValueError(f"{name} has length {arr.shape[0]}, expected {n} (one per request)")
        _check_range(req_sm, "req_sm", 0, self.sms)
        _check_range(req_operand, "req_operand", 0, 3)
        _check_range(req_kind.view(np.uint8) if req_kind.dtype.kind == "b" else req_kind, "req_kind", 0,
                     len(M.KINDS))
        _check_range(req_count, "req_count", 1, 1 << 16)     # a warp request touches at most ~64 sectors
        _check_range(req_first, "req_first", 0, None)
        if n:
            end = int((req_first.astype(np.int64) + req_count).max())
            if end > sectors.shape[0]:
                raise ValueError(f"req_first + req_count reaches {end}, beyond len(sectors) = "
                                 f"{sectors.shape[0]}")
        highest = _check_range(sectors, "sectors", 0, None)
        if sectors.size and (sectors & (self.l1.sector_bytes - 1)).any():
            bad = sectors[(sectors & (self.l1.sector_bytes - 1)) != 0][0]
            raise ValueError(f"sectors must be multiples of sector_bytes={self.l1.sector_bytes}, got {int(bad)}")
        top = 0 if highest is None else highest + 1
        if top > _MAX_ADDRESS:
            raise ValueError(f"sectors must be below 2**47 (byte addresses), got {top - 1}")
        conv = lambda a, t: np.ascontiguousarray(a, dtype=t)  # noqa: E731  (no copy when already right)
        req_first, req_count, sectors = conv(req_first, np.int64), conv(req_count, np.int32), conv(sectors, np.int64)
        packed_first = np.zeros(n, np.int64)
        np.cumsum(req_count[:-1], out=packed_first[1:])
        if not np.array_equal(packed_first, req_first):
            # The bucketed paths keep one L2 slice key per sector *position*: requests that share
            # positions, or are laid out out of order, get their own copies, back to back in issue order.
            sectors = sectors[np.repeat(req_first - packed_first, req_count) + np.arange(int(req_count.sum()))]
            req_first = packed_first
        return (conv(req_sm, np.int32), conv(req_operand, np.uint8), conv(req_kind, np.uint8),
                req_first, req_count, sectors, top)

    def feed(self, req_sm, req_operand, req_kind, req_first, req_count, sectors) -> None:
        """Simulate one chunk of requests (see the module docstring for the arrays' meaning).

        Parameters
        ----------
        req_sm, req_operand, req_kind, req_first, req_count : numpy.ndarray
            One entry per warp-level request, in issue order: SM, operand (0 A, 1 B, 2 C), kind
            (0 ``ld``, 1 store, 2 ``cp.async.cg``, 3 ``cp.async.ca``; bool: load / store), index of
            its first sector in ``sectors`` and number of sectors.
        sectors : numpy.ndarray
            Byte addresses (multiples of the sector size), ascending within a request.

        Raises
        ------
        TypeError, ValueError
            An argument of the wrong type, shape or range (named, with the offending value); nothing
            is simulated then.
        """
        self._feed_unchecked(*self._check_feed(req_sm, req_operand, req_kind, req_first, req_count, sectors))

    def _feed_unchecked(self, req_sm, req_op, req_kind, req_first, req_count, sectors, top=None) -> None:
        """``feed`` without the argument checks, for a trusted producer (``traces.simulate_layer``'s
        generator): the arrays must already be what ``_check_feed`` returns -- contiguous int32, uint8,
        uint8, int64, int32, int64, every value in range, sectors below ``_MAX_ADDRESS``. The checks
        scan every array with numpy, ~3-6 ns per L1 sector lookup (measured on vgg16 conv1_2/conv3_1,
        v100), a tenth of the whole pipeline's time. ``top``: a bound (exclusive) on the chunk's byte
        addresses, e.g. the end of the layer's tensors (None: ``sectors.max() + 1``)."""
        if top is None:
            top = int(sectors.max()) + 1 if sectors.shape[0] else 0
        mode = self._mode
        if mode != "issue" and not self._maps_cover(top):
            mode = "issue"
        if mode == "auto":
            parallel = self.parallel
            if parallel is None:
                parallel = (numba.get_num_threads() > 1 and sectors.shape[0] >= _PARALLEL_MIN_SECTORS
                            and self._choose_parallel())
            mode = "parallel" if parallel else "bucketed"
            if self.parallel is None and self._probe is not None and sectors.shape[0] >= _PARALLEL_MIN_SECTORS:
                start = time.perf_counter()
                self._feed_bucketed(mode, req_sm, req_op, req_kind, req_first, req_count, sectors)
                self._probe.append((mode, (time.perf_counter() - start) / sectors.shape[0]))
                return
        if mode == "issue":
            if not self._tables_current:
                _rebuild_tables(self._l1, self._g1)
                _rebuild_tables(self._l2, self._g2)
                self._tables_current = True
            _feed_serial(self._l1, self._g1, self._l1c, self._l2, self._g2, self._tags, self._l2c,
                         self._shifts, self.l2_slices, self._slice_shift, self.slice_hash == "xor",
                         req_sm, req_op, req_kind, req_first, req_count, sectors)
            return
        self._feed_bucketed(mode, req_sm, req_op, req_kind, req_first, req_count, sectors)

    def _maps_cover(self, top) -> bool:
        """Whether the line -> slot maps cover byte addresses below ``top`` (grown as needed, by half
        again at least, up to ``_MAP_MAX_LINES``); False for good once an address is beyond that."""
        if self._hashed:
            return False
        shift = min(self.l1.line_bytes, self.l2_slice.line_bytes).bit_length() - 1
        lines = ((max(top, 1) - 1) >> shift) + 1
        rows, covered = self._maps.shape
        if lines <= covered:
            return True
        if lines > _MAP_MAX_LINES:
            self._hashed = True
            self._maps = self._maps[:0, :0]
            return False
        self._maps = np.full((rows, min(max(lines, covered * 3 // 2), _MAP_MAX_LINES)), -1, self._maps.dtype)
        return True

    def _map_rows(self, threads):
        """The maps, with a row for each of ``threads`` threads (after ``_maps_cover``)."""
        if self._maps.shape[0] < threads:
            self._maps = np.full((threads, self._maps.shape[1]), -1, self._maps.dtype)
        return self._maps

    def _choose_parallel(self) -> bool:
        """Parallel or serial for the next large chunk. Parallel pays on an idle multi-core machine
        and loses on one whose cores are busy with other work (measured on the 2-core development
        machine under load: 2 threads ran at half the 1-thread speed), so the first large chunks
        alternate serial / parallel (the first two of them warm each path up, the next
        2 x `_PROBE_TIMED` are timed) and the path with the faster best chunk is kept. Both give
        identical counts."""
        probe = self._probe
        if probe is None:
            return self._parallel_chosen
        key = (numba.get_num_threads(), self.sms, self.l2_slices)
        if not probe and _VERDICTS.get(key, (None, 0))[1] > 0:
            # another hierarchy of this shape probed recently in this process: reuse its verdict
            # (simulate_layer makes one hierarchy per layer, and a batch-1 layer has only a few chunks)
            verdict, uses = _VERDICTS[key]
            _VERDICTS[key] = (verdict, uses - 1)
            self._parallel_chosen = verdict
            self._probe = None
            return verdict
        if len(probe) < 2 + 2 * _PROBE_TIMED:
            return len(probe) % 2 == 1
        serial = min(t for _, t in probe[2::2])
        parallel = min(t for _, t in probe[3::2])
        self._parallel_chosen = parallel < serial
        self._probe = None
        _VERDICTS[key] = (self._parallel_chosen, _VERDICT_USES)
        return self._parallel_chosen

    def _feed_bucketed(self, mode, req_sm, req_op, req_kind, req_first, req_count, sectors):
        n_req, n_sec = req_sm.shape[0], sectors.shape[0]
        # per-chunk buffers, reused: O(chunk) memory. An eighth more than asked for: a stream's chunks
        # differ by a few sectors, and reallocating for each slightly larger one grew the peak RSS
        # with the number of chunks (glibc keeps the freed blocks: vgg16 conv3_1 on one thread, 204,
        # 207 and 219 MiB at batch 1, 4 and 16)
        if self._keys.shape[0] < n_sec:
            self._keys = np.empty(n_sec + n_sec // 8, np.int16)    # slices <= 16384; 2 bytes keep the L1 phase lean
            self._packed = np.empty(n_sec + n_sec // 8, np.int64)
        if self._reqs.shape[0] < n_req:
            self._reqs = np.empty(n_req + n_req // 8, np.int64)
        # only sectors some request refers to are read back (requests never share a sector: feed
        # normalises the layout, the generator's is already disjoint), so keys needs no clearing
        keys, packed, reqs = self._keys[:n_sec], self._packed[:n_sec], self._reqs[:n_req]
        parallel = mode == "parallel"
        parts = _BUCKET_PARTS if parallel else 1
        if self._hist.shape[0] != parts:
            self._hist = np.zeros((parts, self.l2_slices), np.int64)
        xor_hash = self.slice_hash == "xor"
        maps = self._map_rows(numba.get_num_threads() if parallel else 1)
        self._tables_current = False
        _bucket_requests(req_sm, req_op, req_kind, req_first, req_count, self.sms, self._starts_sm, reqs)
        # Parallel loops hand out one SM / slice / index range at a time (chunk size 1, not Numba's
        # static halves): on a shared machine a descheduled thread then holds up one SM, not half.
        chunksize = numba.set_parallel_chunksize(1) if parallel else None
        try:
            (_l1_phase_parallel if parallel else _l1_phase_serial)(
                self._l1, self._g1, self._l1c, _busy(self._starts_sm) if parallel else self.sms,
                self._starts_sm, reqs, sectors, self._shifts, self.l2_slices, xor_hash, keys, self._hist, maps,
                *self._l1_variant)
            (_l2_bucket_parallel if parallel else _l2_bucket_counted)(
                keys, sectors, req_op, req_kind, req_first, req_count, self._hist, self._starts_slice, packed,
                self._shifts, self.l2_slices, self._slice_shift, self._g2)
            (_l2_phase_parallel if parallel else _l2_phase_serial)(
                self._l2, self.l2_slice.ways, self._tags, self._l2c,
                _busy(self._starts_slice) if parallel else self.l2_slices, self._starts_slice,
                packed, self.l2_slice.sectors_per_line, maps)
        finally:
            if parallel:
                numba.set_parallel_chunksize(chunksize)

    def metrics(self) -> dict:
        """Counts so far: every key of ``simcore.metrics.METRICS``, totals and per operand."""
        out = {}
        l1 = self._l1c.sum(axis=0).reshape(4, 4, 4)     # [kind, operand (0..2 used), k]
        l2 = self._l2c.sum(axis=0).reshape(3, 8)
        dirty = _dirty_by_operand(self._l2[1], self._tags, self.l2_slice.sectors_per_line)
        per_op = {}
        for kind, keys in enumerate(M.KIND_KEYS):
            for k, key in enumerate(keys):
                per_op[key] = l1[kind, :3, k]
        for k, key in enumerate(_L2_KEYS):
            per_op[key] = l2[:, k]
        per_op[M.L2_DIRTY_AT_END] = dirty
        for key in M.METRICS:
            out[key] = int(per_op[key].sum())
        for key in M.METRICS:
            for o, op in enumerate(M.OPERANDS):
                out[M.operand_key(key, op)] = int(per_op[key][o])
        return out
