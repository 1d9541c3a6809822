"""simcore.Hierarchy: agreement with NaiveHierarchy, conservation laws, serial == parallel, bad input."""
import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcore import CacheConfig, Hierarchy, gpu
from simcore import metrics as M
from tests.naive_cache import NaiveHierarchy

MODES = ("issue", "bucketed", "parallel")


def make_requests(rng, n_req, sms, span_sectors, store_rate=0.2, max_count=6, sector_bytes=32, kinds=None):
    """Random requests: each touches distinct ascending sectors near a random base. ``kinds``: the
    probabilities of request kinds 0..3 (None: loads, and stores at ``store_rate``)."""
    req_sm = rng.integers(0, sms, n_req).astype(np.int32)
    req_op = rng.integers(0, 3, n_req).astype(np.uint8)
    if kinds is None:
        req_st = (rng.random(n_req) < store_rate).astype(np.uint8)
    else:
        req_st = rng.choice(4, n_req, p=kinds).astype(np.uint8)
    sectors, first, count = [], [], []
    for _ in range(n_req):
        base = int(rng.integers(0, span_sectors))
        chosen = sorted(set(int(x) for x in base + rng.integers(0, 8, int(rng.integers(1, max_count + 1)))))
        first.append(len(sectors))
        count.append(len(chosen))
        sectors.extend(s * sector_bytes for s in chosen)
    return (req_sm, req_op, req_st, np.array(first, np.int64), np.array(count, np.int32),
            np.array(sectors, np.int64))


@st.composite
def hierarchies(draw):
    l1_sets = draw(st.sampled_from([1, 2, 4]))
    l1_ways = draw(st.integers(1, 4))
    sector = draw(st.sampled_from([32, 16]))     # 16: 8 sectors per line (dirty bit 7 is int16's sign)
    l1 = CacheConfig(l1_sets * l1_ways * 128, l1_ways, 128, sector)
    l2_sets = draw(st.sampled_from([1, 2, 3, 4]))
    l2_ways = draw(st.integers(1, 4))
    l2_index = draw(st.sampled_from(["linear", "xor"] if l2_sets != 3 else ["linear"]))
    l2 = CacheConfig(l2_sets * l2_ways * 128, l2_ways, 128, sector, l2_index)
    return dict(l1=l1, sms=draw(st.integers(1, 4)), l2_slice=l2, l2_slices=draw(st.integers(1, 5)),
                slice_hash=draw(st.sampled_from(["linear", "xor"])))


@settings(max_examples=60)
@given(hierarchies(), st.integers(0, 2 ** 32 - 1), st.sampled_from([16, 64, 400]), st.integers(1, 3))
def test_matches_naive_hierarchy_in_every_mode(geometry, seed, span, chunks):
    rng = np.random.default_rng(seed)
    chunks = [make_requests(rng, int(rng.integers(0, 120)), geometry["sms"], span,
                            sector_bytes=geometry["l1"].sector_bytes) for _ in range(chunks)]
    expected, results = naive_and_every_mode(geometry, chunks)
    for mode, got in results.items():
        assert got == expected, mode


def naive_and_every_mode(geometry, chunks):
    """Metrics of NaiveHierarchy and of Hierarchy in each of MODES, all fed the same ``chunks``."""
    naive = NaiveHierarchy(**geometry)
    sims = {}
    for mode in MODES:
        sims[mode] = Hierarchy(**geometry)
        sims[mode]._mode = mode
    for chunk in chunks:
        naive.feed(*chunk)
        for h in sims.values():
            h.feed(*chunk)
    return naive.metrics(), {mode: h.metrics() for mode, h in sims.items()}


def test_matches_naive_on_a_bigger_stream_with_non_power_of_two_slices():
    rng = np.random.default_rng(7)
    geometry = dict(l1=CacheConfig(4 * 8 * 128, 8), sms=6, l2_slice=CacheConfig(4 * 4 * 128, 4, index="xor"),
                    l2_slices=5, slice_hash="xor")
    naive, h = NaiveHierarchy(**geometry), Hierarchy(**geometry)
    h.parallel = True
    for _ in range(3):
        chunk = make_requests(rng, 3000, 6, 3000)
        naive.feed(*chunk)
        h.feed(*chunk)
    assert h.metrics() == naive.metrics()


@pytest.mark.parametrize("kinds", [None, (0.25, 0.25, 0.25, 0.25)])      # loads and stores; every kind
@pytest.mark.parametrize("sector_bytes, slices", [(32, 4), (32, 5), (16, 4)])
def test_matches_naive_on_the_specialised_and_the_generic_kernels(sector_bytes, slices, kinds):
    # 128-byte lines, 32-byte sectors, linear power-of-two L1 sets, an xor slice hash and
    # xor-indexed slices: the geometry the L1 and L2 loops compile with constants (4 slices as on
    # v100, 5 as on h100's 80); 16-byte sectors take the generic copies of the same loops
    rng = np.random.default_rng(11)
    geometry = dict(l1=CacheConfig(4 * 6 * 128, 6, 128, sector_bytes), sms=5,
                    l2_slice=CacheConfig(4 * 3 * 128, 3, 128, sector_bytes, "xor"), l2_slices=slices,
                    slice_hash="xor")
    chunks = [make_requests(rng, 2000, 5, 1500, sector_bytes=sector_bytes, kinds=kinds) for _ in range(3)]
    expected, results = naive_and_every_mode(geometry, chunks)
    assert expected[M.L1_LD_HITS] > 0 and expected[M.L2_RD_HITS] > 0 and expected[M.DRAM_WR_SECTORS] > 0
    if kinds is not None:
        assert expected[M.L1_LDGSTS_ACCESS_HITS] > 0 and expected[M.L1_LDGSTS_ACCESS_MISSES] > 0
        assert expected[M.L1_LDGSTS_BYPASS_SECTORS] > 0
    for mode, got in results.items():
        assert got == expected, mode


# ---- hand-made cases ---------------------------------------------------------------------------

def one_request_each(*reqs):
    """reqs: (sm, operand, is_store, [sector addresses])."""
    sectors, first, count = [], [], []
    for _, _, _, secs in reqs:
        first.append(len(sectors))
        count.append(len(secs))
        sectors.extend(secs)
    return (np.array([r[0] for r in reqs], np.int32), np.array([r[1] for r in reqs], np.uint8),
            np.array([r[2] for r in reqs], np.uint8), np.array(first, np.int64), np.array(count, np.int32),
            np.array(sectors, np.int64))


@settings(max_examples=30)
@given(hierarchies(), st.integers(0, 2 ** 32 - 1))
def test_requests_may_share_and_reorder_their_sectors(geometry, seed):
    # feed's arrays only say which sectors each request touches: requests laid out backwards over
    # one shared sector array, some pointing at the same positions, must give the naive result
    rng = np.random.default_rng(seed)
    req_sm, req_op, req_st, first, count, sectors = make_requests(
        rng, 60, geometry["sms"], 64, sector_bytes=geometry["l1"].sector_bytes)
    order = np.arange(len(first))[::-1]
    shuffled = sectors.copy()
    new_first = np.empty_like(first)
    pos = 0
    for r in order:                               # lay the requests out last to first
        shuffled[pos:pos + count[r]] = sectors[first[r]:first[r] + count[r]]
        new_first[r] = pos
        pos += count[r]
    new_first[1::5] = new_first[0::5][:len(new_first[1::5])]      # every 5th request reuses another's
    count = count.copy()
    count[1::5] = count[0::5][:len(count[1::5])]
    naive = NaiveHierarchy(**geometry)
    naive.feed(req_sm, req_op, req_st, new_first, count, shuffled)
    for mode in MODES:
        h = Hierarchy(**geometry)
        h._mode = mode
        h.feed(req_sm, req_op, req_st, new_first, count, shuffled)
        assert h.metrics() == naive.metrics(), mode


def test_stores_bypass_l1_and_allocate_dirty_in_l2():
    h = Hierarchy(CacheConfig(1024, 2), 1, CacheConfig(1024, 2), 1, "linear")
    # store C to sector 0: L1 untouched; L2 write tag miss, sector dirty (no DRAM read).
    # load A of sector 0: L1 miss (the store did not allocate), L2 read hit (written sector is valid).
    # load A of sector 32: L1 sector miss, L2 sector miss -> one DRAM read.
    h.feed(*one_request_each((0, 2, 1, [0]), (0, 0, 0, [0, 32])))
    m = h.metrics()
    assert m[M.L1_ST_REQUESTS] == 1 and m[M.L1_ST_SECTORS] == 1
    assert m[M.L1_LD_REQUESTS] == 1 and m[M.L1_LD_SECTORS] == 2
    assert m[M.L1_LD_HITS] == 0 and m[M.L1_LD_MISSES] == 2
    assert (m[M.L2_WR_SECTORS], m[M.L2_WR_HITS], m[M.L2_WR_MISSES]) == (1, 0, 1)
    assert (m[M.L2_RD_SECTORS], m[M.L2_RD_HITS], m[M.L2_RD_MISSES]) == (2, 1, 1)
    assert (m[M.DRAM_RD_SECTORS], m[M.DRAM_WR_SECTORS]) == (1, 0)
    assert m[M.L2_DIRTY_AT_END] == 1 and m[M.operand_key(M.L2_DIRTY_AT_END, "C")] == 1


def test_dram_writes_are_attributed_to_the_storing_operand():
    # L2: one slice, one set of one line. C stores two sectors of line 0, then A loads line 1: the
    # eviction writes the 2 dirty sectors to DRAM, counted under C; A's read miss under A.
    h = Hierarchy(CacheConfig(1024, 2), 1, CacheConfig(128, 1), 1, "linear")
    h.feed(*one_request_each((0, 2, 1, [0, 32]), (0, 0, 0, [128])))
    m = h.metrics()
    assert m[M.DRAM_WR_SECTORS] == 2 and m[M.operand_key(M.DRAM_WR_SECTORS, "C")] == 2
    assert m[M.operand_key(M.DRAM_RD_SECTORS, "A")] == 1
    assert m[M.L2_DIRTY_AT_END] == 0


def test_l1s_are_private_and_l2_is_shared():
    h = Hierarchy(CacheConfig(1024, 2), 2, CacheConfig(4096, 4), 2, "xor")
    # SM 0 and SM 1 load the same sector: both L1s miss, the second L2 read hits.
    h.feed(*one_request_each((0, 1, 0, [4096]), (1, 1, 0, [4096]), (1, 1, 0, [4096])))
    m = h.metrics()
    assert (m[M.L1_LD_HITS], m[M.L1_LD_MISSES]) == (1, 2)
    assert (m[M.L2_RD_HITS], m[M.L2_RD_MISSES]) == (1, 1)
    assert m[M.operand_key(M.L1_LD_SECTORS, "B")] == 3


def test_unreferenced_sectors_are_ignored():
    h = Hierarchy(CacheConfig(1024, 2), 1, CacheConfig(1024, 2), 1)
    req = one_request_each((0, 0, 0, [64]))
    h.feed(*req[:5], np.array([64, 0, 32, 96], np.int64))   # sectors 1..3 belong to no request
    assert h.metrics()[M.L1_LD_SECTORS] == 1 and h.metrics()[M.L2_RD_SECTORS] == 1


# ---- conservation laws, serial == parallel, bounded memory --------------------------------------

@pytest.fixture(scope="module")
def conv_stream():
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from bench_simcore import conv_stream as make
    return make(batch=2)


def feed_in_chunks(h, stream, chunk):
    req_sm, req_op, req_st, first, count, sectors = stream
    for start in range(0, req_sm.shape[0], chunk):
        stop = min(start + chunk, req_sm.shape[0])
        base, end = first[start], first[stop - 1] + count[stop - 1]
        h.feed(req_sm[start:stop], req_op[start:stop], req_st[start:stop], first[start:stop] - base,
               count[start:stop], sectors[base:end])


def v100_hierarchy():
    v100 = gpu("v100")
    return Hierarchy.for_gpu(v100, v100.l1_config(2, 16384))


def with_stores(stream):
    """The conv stream with every 7th request turned into a store of operand C."""
    req_sm, req_op, req_st, first, count, sectors = stream
    req_st = req_st.copy()
    req_op = req_op.copy()
    req_st[::7] = 1
    req_op[::7] = 2
    return req_sm, req_op, req_st, first, count, sectors


def test_conservation_laws(conv_stream):
    stream = with_stores(conv_stream)
    h = v100_hierarchy()
    feed_in_chunks(h, stream, 5000)
    m = h.metrics()
    loads = stream[2] == 0
    assert m[M.L1_LD_REQUESTS] == loads.sum() and m[M.L1_ST_REQUESTS] == (~loads).sum()
    assert m[M.L1_LD_SECTORS] == stream[4][loads].sum() and m[M.L1_ST_SECTORS] == stream[4][~loads].sum()
    assert m[M.L1_LD_HITS] + m[M.L1_LD_MISSES] == m[M.L1_LD_SECTORS]
    assert m[M.L2_RD_SECTORS] == m[M.L1_LD_MISSES]
    assert m[M.L2_RD_HITS] + m[M.L2_RD_MISSES] == m[M.L2_RD_SECTORS]
    assert m[M.DRAM_RD_SECTORS] == m[M.L2_RD_MISSES]
    assert m[M.L2_WR_SECTORS] == m[M.L1_ST_SECTORS]
    assert m[M.L2_WR_HITS] + m[M.L2_WR_MISSES] == m[M.L2_WR_SECTORS]
    assert m[M.DRAM_WR_SECTORS] + m[M.L2_DIRTY_AT_END] <= m[M.L2_WR_SECTORS]
    assert m[M.L1_LD_HITS] > 0 and m[M.L2_RD_HITS] > 0
    for key in M.METRICS:
        assert m[key] == sum(m[M.operand_key(key, op)] for op in M.OPERANDS), key
    assert set(m) == set(M.all_keys())
    assert all(isinstance(v, int) for v in m.values())


def test_serial_parallel_and_chunking_agree(conv_stream):
    stream = with_stores(conv_stream)
    results = []
    for mode, chunk in (("issue", 1 << 30), ("bucketed", 3000), ("parallel", 1 << 30), ("parallel", 777)):
        h = v100_hierarchy()
        h._mode = mode
        feed_in_chunks(h, stream, chunk)
        results.append(h.metrics())
    assert all(r == results[0] for r in results[1:])


def test_parallel_with_one_and_two_threads_agree(conv_stream):
    results = []
    before = numba.get_num_threads()
    try:
        for threads in sorted({1, min(2, numba.config.NUMBA_NUM_THREADS)}):
            numba.set_num_threads(threads)
            h = v100_hierarchy()
            h.parallel = True
            feed_in_chunks(h, conv_stream, 1 << 30)
            results.append(h.metrics())
    finally:
        numba.set_num_threads(before)
    assert all(r == results[0] for r in results)


def test_memory_is_bounded_by_state_and_chunk(conv_stream):
    h = v100_hierarchy()
    state_bytes = sum(a.nbytes for a in h._l1 + h._l2) + h._tags.nbytes
    feed_in_chunks(h, conv_stream, 2000)
    biggest_chunk = 2000 * 8
    buffers = h._keys.nbytes + h._packed.nbytes + h._reqs.nbytes
    assert buffers <= biggest_chunk * (2 + 8) + 2000 * 8
    assert sum(a.nbytes for a in h._l1 + h._l2) + h._tags.nbytes == state_bytes


def test_chunk_buffers_are_not_reallocated_for_slightly_larger_chunks():
    # a stream's chunks differ by a few sectors: each slightly larger one used to reallocate the
    # buffers, and the freed blocks grew the process's peak memory with the number of chunks
    h = Hierarchy(CacheConfig(1024, 2), 2, CacheConfig(2048, 2), 2)
    h._mode = "bucketed"
    rng = np.random.default_rng(1)
    buffers = None
    for n_req in (500, 503, 510, 520, 540):
        chunk = make_requests(rng, n_req, 2, 400, max_count=1)         # one sector per request
        h.feed(*chunk)
        if buffers is None:
            buffers = (h._keys, h._packed, h._reqs)
        assert all(a is b for a, b in zip(buffers, (h._keys, h._packed, h._reqs))), n_req
    h.feed(*make_requests(rng, 600, 2, 400, max_count=1))              # 20 % more: reallocated
    assert h._packed is not buffers[1] and h._packed.shape[0] >= 600


def test_metrics_can_be_read_between_chunks(conv_stream):
    h = v100_hierarchy()
    feed_in_chunks(h, conv_stream, 1000)
    first = h.metrics()
    assert h.metrics() == first
    h.feed(*one_request_each((0, 0, 0, [0])))
    assert h.metrics()[M.L1_LD_REQUESTS] == first[M.L1_LD_REQUESTS] + 1


def test_for_gpu_uses_the_gpu_l2():
    a100 = gpu("a100")
    h = Hierarchy.for_gpu(a100, a100.l1_config(2, 16384))
    assert (h.sms, h.l2_slices, h.slice_hash) == (108, 160, "xor")
    assert h.l2_slice == a100.l2_slice_config()
    h.feed(*one_request_each((107, 0, 0, [1 << 30])))
    assert h.metrics()[M.DRAM_RD_SECTORS] == 1


# ---- bad input ---------------------------------------------------------------------------------

def test_bad_constructor_arguments():
    l1, l2 = CacheConfig(1024, 2), CacheConfig(1024, 2)
    with pytest.raises(TypeError, match="l1"):
        Hierarchy({"size_bytes": 1024}, 1, l2, 1)
    with pytest.raises(TypeError, match="l2_slice"):
        Hierarchy(l1, 1, None, 1)
    with pytest.raises(ValueError, match="sms"):
        Hierarchy(l1, 0, l2, 1)
    with pytest.raises(TypeError, match="l2_slices"):
        Hierarchy(l1, 1, l2, 2.0)
    with pytest.raises(ValueError, match="slice_hash"):
        Hierarchy(l1, 1, l2, 1, "modulo")
    with pytest.raises(ValueError, match="sector_bytes"):
        Hierarchy(l1, 1, CacheConfig(1024, 2, 128, 64), 1)


def _good():
    return list(one_request_each((0, 0, 0, [0, 32]), (1, 2, 1, [64])))


@pytest.mark.parametrize("index, value, error, match", [
    (0, np.array([0, 2], np.int32), ValueError, "req_sm must be < 2"),
    (0, np.array([-1, 0], np.int32), ValueError, "req_sm must be >= 0"),
    (0, np.array([0.0, 1.0]), TypeError, "req_sm"),
    (0, [0, 1], TypeError, "req_sm must be a numpy array"),
    (1, np.array([0, 3], np.uint8), ValueError, "req_operand must be < 3"),
    (1, np.array([0], np.uint8), ValueError, "req_operand has length 1"),
    (2, np.array([0, 4], np.uint8), ValueError, "req_kind must be < 4, got 4"),
    (2, np.array([0, -1], np.int8), ValueError, "req_kind must be >= 0"),
    (2, np.array([0.0, 1.0]), TypeError, "req_kind"),
    (3, np.array([0, 5], np.int64), ValueError, "beyond len\\(sectors\\)"),
    (3, np.array([-1, 2], np.int64), ValueError, "req_first must be >= 0"),
    (4, np.array([2, 0], np.int32), ValueError, "req_count must be >= 1"),
    (4, np.array([[2, 1]], np.int32), ValueError, "req_count must be 1-D"),
    (4, np.array([2, 1 << 16], np.int32), ValueError, "req_count must be < 65536"),
    (5, np.array([0, 33, 64], np.int64), ValueError, "multiples of sector_bytes=32, got 33"),
    (5, np.array([0, -32, 64], np.int64), ValueError, "sectors must be >= 0"),
    (5, np.array([0, 32, 1 << 56], np.int64), ValueError, "sectors must be below"),
    (5, np.array([0.0, 32.0, 64.0]), TypeError, "sectors"),
])
def test_bad_feed_arguments(index, value, error, match):
    h = Hierarchy(CacheConfig(1024, 2), 2, CacheConfig(1024, 2), 1)
    args = _good()
    args[index] = value
    with pytest.raises(error, match=match):
        h.feed(*args)
    assert h.metrics()[M.L1_LD_REQUESTS] == 0        # nothing was simulated


def test_bool_store_flags_are_accepted():
    h = Hierarchy(CacheConfig(1024, 2), 2, CacheConfig(1024, 2), 1)
    args = _good()
    args[2] = args[2].astype(bool)
    h.feed(*args)
    assert h.metrics()[M.L1_ST_REQUESTS] == 1


def test_automatic_choice_of_path_keeps_counts_identical(conv_stream):
    h = v100_hierarchy()
    assert h.parallel is None
    req_sm, req_op, req_st, first, count, sectors = conv_stream
    before = numba.get_num_threads()
    numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
    try:
        for _ in range(7):                     # the same chunk 7 times: probe serial/parallel, then choose
            h.feed(req_sm, req_op, req_st, first, count, sectors)
    finally:
        numba.set_num_threads(before)
    again = v100_hierarchy()
    again.parallel = False
    for _ in range(7):
        again.feed(req_sm, req_op, req_st, first, count, sectors)
    assert h.metrics() == again.metrics()
    if numba.config.NUMBA_NUM_THREADS > 1:
        assert h._probe is None               # the choice was made


def test_a_finished_probe_is_reused_by_the_next_hierarchies(conv_stream, monkeypatch):
    from simcore import hierarchy as H
    monkeypatch.setattr(H, "_VERDICTS", {})
    monkeypatch.setattr(H, "_VERDICT_USES", 2)
    before = numba.get_num_threads()
    numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
    try:
        if numba.get_num_threads() < 2:
            pytest.skip("needs two Numba threads")
        first = v100_hierarchy()
        for _ in range(7):
            first.feed(*conv_stream)
        verdict = first._parallel_chosen
        reference = v100_hierarchy()
        reference.parallel = False
        reference.feed(*conv_stream)
        probes = []
        for _ in range(3):                     # two reuse the verdict, the third probes afresh
            h = v100_hierarchy()
            h.feed(*conv_stream)
            probes.append(h._probe is None)
            assert h.metrics() == reference.metrics()
            if h._probe is None:
                assert h._parallel_chosen == verdict
    finally:
        numba.set_num_threads(before)
    assert probes == [True, True, False]


@pytest.mark.parametrize("mode", ["issue", "bucketed"])
@pytest.mark.parametrize("slices", [80, 160, 96, 64])
def test_no_two_lines_share_an_l2_tag(slices, mode):
    # Every sector is read exactly once, by loads that all miss in L1 (each sector is touched once).
    # Whatever the slice count, a line is only ever present after it was accessed, so each access is
    # a compulsory miss: L2 read misses == DRAM reads == sectors. With the key line // slices alone
    # (an earlier bug) lines aliased under 80/160 slices and some of these reads hit. Both paths, as
    # the hash tables (issue order) and the maps (bucketed) take the same keys.
    n = 1 << 17
    sectors = (np.arange(n, dtype=np.int64) * 32)
    l2 = CacheConfig(640 * 1024, 20, index="xor")          # big enough: no evictions
    h = Hierarchy(CacheConfig(4 * 512, 1), 1, l2, slices)
    h._mode = mode
    h.feed(np.zeros(n // 4, np.int32), np.zeros(n // 4, np.uint8), np.zeros(n // 4, np.uint8),
           np.arange(0, n, 4, dtype=np.int64), np.full(n // 4, 4, np.int32), sectors)
    m = h.metrics()
    assert m[M.L2_RD_SECTORS] == n
    assert m[M.L2_RD_MISSES] == n
    assert m[M.DRAM_RD_SECTORS] == n
    # and a second pass over the same data now hits everywhere (the L2 holds 50 MB at 80 slices)
    if slices * 640 * 1024 >= n * 32:
        h.feed(np.zeros(n // 4, np.int32), np.zeros(n // 4, np.uint8), np.zeros(n // 4, np.uint8),
               np.arange(0, n, 4, dtype=np.int64), np.full(n // 4, 4, np.int32), sectors)
        assert h.metrics()[M.L2_RD_HITS] == n


def test_linear_l2_slices_with_three_sets_keep_lines_apart():
    # 3 sets per slice (linear index), 5 slices: 60 lines that all fit must all stay apart.
    n = 3 * 5 * 4                                     # 60 lines, 4 ways x 3 sets x 5 slices = room for all
    sectors = np.arange(n, dtype=np.int64) * 128
    h = Hierarchy(CacheConfig(4 * 512, 1), 1, CacheConfig(3 * 4 * 128, 4), 5, slice_hash="linear")
    args = (np.zeros(n, np.int32), np.zeros(n, np.uint8), np.zeros(n, np.uint8),
            np.arange(n, dtype=np.int64), np.ones(n, np.int32), sectors)
    h.feed(*args)
    h.feed(*args)
    m = h.metrics()
    assert m[M.L2_RD_MISSES] == n and m[M.L2_RD_HITS] == n   # all fit: second pass hits every line
