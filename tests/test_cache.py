"""simcore.simulate_trace: exact agreement with the naive reference, hand-made cases, properties, bad input."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcore import CacheConfig, CacheStats, simulate_trace
from tests.naive_cache import NaiveCache, naive_simulate_trace


@st.composite
def geometries(draw, max_ways=8):
    sets = draw(st.sampled_from([1, 2, 3, 4, 5, 8, 16]))
    ways = draw(st.integers(1, max_ways))
    line = draw(st.sampled_from([16, 32, 64, 128]))
    sector = draw(st.sampled_from([s for s in (8, 16, 32, 64, 128) if s <= line and line // s <= 8]))
    pow2 = sets & (sets - 1) == 0
    index = draw(st.sampled_from(["linear", "xor"] if pow2 else ["linear"]))
    return CacheConfig(sets * ways * line, ways, line, sector, index)


@st.composite
def traces(draw, with_writes=None):
    config = draw(geometries())
    span_lines = draw(st.integers(1, 4 * config.lines))
    n = draw(st.integers(0, 300))
    sector_ids = draw(st.lists(st.integers(0, span_lines * config.sectors_per_line - 1), min_size=n, max_size=n))
    base = draw(st.sampled_from([0, 1 << 20, 1 << 40]))
    addresses = np.array([base + s * config.sector_bytes for s in sector_ids], dtype=np.int64)
    if with_writes is None:
        with_writes = draw(st.booleans())
    writes = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool) if with_writes else None
    return config, addresses, writes


@settings(max_examples=150)
@given(traces())
def test_matches_naive_reference(case):
    config, addresses, writes = case
    assert simulate_trace(addresses, config, writes) == naive_simulate_trace(addresses, config, writes)


@settings(max_examples=20)
@given(st.integers(0, 2 ** 32 - 1))
def test_matches_naive_on_long_traces_with_many_evictions(seed):
    # Large associativity and long traces exercise the hash table's backward-shift deletion.
    rng = np.random.default_rng(seed)
    ways = int(rng.choice([16, 64, 100]))
    config = CacheConfig(int(rng.choice([1, 4, 5])) * ways * 128, ways, 128, 32)
    stride = int(rng.choice([32, 4096, 1 << 17]))
    addresses = rng.integers(0, 3 * config.lines * 4, 4000) * stride
    writes = rng.random(4000) < 0.25
    assert simulate_trace(addresses, config, writes) == naive_simulate_trace(addresses, config, writes)


@pytest.mark.parametrize("lines, expected", [(8192, np.int16), (8193, np.int32)])
def test_large_caches_use_wide_slot_numbers_and_still_match_naive(lines, expected):
    # Slot numbers and table positions are int16 while the hash table (4 x lines, a power of two)
    # has at most 2**15 positions, int32 above: both paths against the reference, 8 sectors per line
    # so that dirty sector 7 sets the int16 sign bit.
    from simcore.cache import _small_ints
    config = CacheConfig(lines * 64, lines // 4 if lines % 4 == 0 else lines, 64, 8)
    assert _small_ints(config) is expected
    rng = np.random.default_rng(lines)
    addresses = rng.integers(0, 3 * config.lines * 8, 30000) * 8
    writes = rng.random(30000) < 0.3
    assert simulate_trace(addresses, config, writes) == naive_simulate_trace(addresses, config, writes)


# ---- hand-made cases ---------------------------------------------------------------------------

def test_sector_miss_versus_tag_miss():
    config = CacheConfig(256, 2, 128, 32)  # 1 set, 2 ways, 4 sectors per line
    # 0: tag miss (line 0 allocated, sector 0 valid); 32: same line, sector 1 invalid -> sector miss;
    # 0 and 32 again: hits. misses = 1 sector miss + 1 tag miss.
    stats = simulate_trace(np.array([0, 32, 0, 32]), config)
    assert (stats.accesses, stats.hits, stats.misses, stats.tag_misses) == (4, 2, 2, 1)
    assert stats.sector_misses == 1


def test_lru_eviction_order():
    config = CacheConfig(256, 2, 128, 128)  # 1 set of 2 lines, plain line cache
    a, b, c = 0, 128, 256
    # A miss, B miss, A hit (A now MRU, B LRU), C miss evicts B -> {A, C}, B miss evicts A -> {C, B},
    # B hit, C hit, A miss evicts B (LRU after C's hit). 3 hits, 5 tag misses.
    stats = simulate_trace(np.array([a, b, a, c, b, b, c, a]), config)
    assert (stats.hits, stats.misses, stats.tag_misses) == (3, 5, 5)
    # Without the re-use of A, C evicts A (now the LRU line) and B hits.
    stats = simulate_trace(np.array([a, b, c, b]), config)
    assert (stats.hits, stats.tag_misses) == (1, 3)


def test_lru_is_updated_by_any_sector_of_the_line():
    config = CacheConfig(256, 2, 128, 32)
    # line 0 sector 0, line 1, line 0 sector 3 (sector miss, but makes line 0 MRU), line 2 evicts
    # line 1 (LRU); line 0 sector 0 then hits.
    stats = simulate_trace(np.array([0, 128, 96, 256, 0]), config)
    assert (stats.hits, stats.misses, stats.tag_misses) == (1, 4, 3)


def test_write_allocate_without_fetch():
    config = CacheConfig(128, 1, 128, 32)  # one line of 4 sectors
    addresses = np.array([0, 0, 32, 32, 64, 128, 160])
    writes = np.array([1, 0, 0, 1, 1, 0, 1], dtype=bool)
    # W0: tag miss, sector 0 valid+dirty (no fetch of the other sectors)
    # R0: hit.  R32: sector miss (sector 1 was not fetched by the write)
    # W32: write hit (now valid), dirty.  W64: write sector miss, dirty.
    # R128: tag miss, evicts line 0 with dirty sectors 0, 1, 2 -> 3 dirty evictions
    # W160: line 1 sector 1: write sector miss, dirty -> 1 dirty sector at the end.
    stats = simulate_trace(addresses, config, writes)
    assert stats == CacheStats(accesses=7, hits=2, misses=5, tag_misses=2, read_accesses=3, read_hits=1,
                               write_accesses=4, write_hits=1, dirty_evictions=3, dirty_at_end=1)


def test_xor_index_spreads_power_of_two_strides():
    linear = CacheConfig(4 * 128, 1, 128, 128, "linear")
    xor = CacheConfig(4 * 128, 1, 128, 128, "xor")
    # lines 0 and 4: linear sets 0 and 0 (conflict); xor (b = 2): 0 -> 0, 4 -> 4 ^ 1 = 5 & 3 = 1.
    trace = np.array([0, 4 * 128, 0])
    assert simulate_trace(trace, linear).tag_misses == 3
    assert simulate_trace(trace, xor).tag_misses == 2


def test_empty_trace_and_lists():
    config = CacheConfig(1024, 2)
    assert simulate_trace(np.array([], dtype=np.int64), config) == CacheStats(0, 0, 0, 0)
    assert simulate_trace([], config) == CacheStats(0, 0, 0, 0)
    assert simulate_trace([0, 0, 32], config).hits == 1
    assert simulate_trace(np.array([0, 0], dtype=np.uint32), config, [True, False]).write_accesses == 1


def test_naive_cache_reports_outcomes():
    cache = NaiveCache(CacheConfig(256, 2, 128, 32))
    assert [cache.access(a) for a in (0, 32, 0)] == ["tag_miss", "sector_miss", "hit"]


# ---- properties --------------------------------------------------------------------------------

@settings(max_examples=60)
@given(traces())
def test_counts_are_consistent(case):
    config, addresses, writes = case
    stats = simulate_trace(addresses, config, writes)
    assert stats.hits + stats.misses == stats.accesses == len(addresses)
    assert stats.read_accesses + stats.write_accesses == stats.accesses
    assert stats.read_hits + stats.write_hits == stats.hits
    assert 0 <= stats.tag_misses <= stats.misses
    n_writes = 0 if writes is None else int(writes.sum())
    assert stats.write_accesses == n_writes
    # every dirty sector is written by some write, and is either evicted or still there
    assert stats.dirty_evictions + stats.dirty_at_end <= n_writes
    if writes is None:
        assert stats.dirty_evictions == stats.dirty_at_end == 0


@settings(max_examples=60)
@given(st.lists(st.integers(0, 63), max_size=300), st.integers(1, 16), st.integers(1, 16))
def test_lru_inclusion_fully_associative(lines, small, extra):
    # Stack property of LRU: a larger fully-associative cache never takes more tag misses.
    addresses = np.array(lines, dtype=np.int64) * 128
    small_cache = CacheConfig(small * 128, small, 128, 128)
    large_cache = CacheConfig((small + extra) * 128, small + extra, 128, 128)
    assert simulate_trace(addresses, large_cache).tag_misses <= simulate_trace(addresses, small_cache).tag_misses


@settings(max_examples=60)
@given(traces(with_writes=False))
def test_sector_equal_to_line_is_a_plain_line_cache(case):
    config, addresses, _ = case
    line_cache = CacheConfig(config.size_bytes, config.ways, config.line_bytes, config.line_bytes, config.index)
    stats = simulate_trace(addresses, line_cache)
    assert stats.misses == stats.tag_misses                   # no sector misses without sectors
    # the same as a sectored cache that only ever sees sector 0 of each line
    rounded = addresses - addresses % config.line_bytes
    assert simulate_trace(rounded, config) == stats
    # and tag misses do not depend on the sector size
    assert simulate_trace(addresses, config).tag_misses == stats.tag_misses


# ---- bad input ---------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, error, match", [
    (dict(size_bytes=0, ways=1), ValueError, "size_bytes"),
    (dict(size_bytes=-128, ways=1), ValueError, "size_bytes"),
    (dict(size_bytes=1024.0, ways=1), TypeError, "size_bytes"),
    (dict(size_bytes=1024, ways=0), ValueError, "ways"),
    (dict(size_bytes=1024, ways=True), TypeError, "ways"),
    (dict(size_bytes=1000, ways=2), ValueError, "multiple of line_bytes"),
    (dict(size_bytes=3 * 256, ways=2, index="xor"), ValueError, "power-of-two"),
    (dict(size_bytes=1024, ways=2, index="modulo"), ValueError, "index"),
    (dict(size_bytes=1024, ways=2, line_bytes=96), ValueError, "line_bytes"),
    (dict(size_bytes=1024, ways=2, sector_bytes=256), ValueError, "sector_bytes"),
    (dict(size_bytes=1024, ways=2, sector_bytes=24), ValueError, "sector_bytes"),
    (dict(size_bytes=1024, ways=1, sector_bytes=8), ValueError, "at most 8 sectors"),
])
def test_bad_cache_config(kwargs, error, match):
    with pytest.raises(error, match=match):
        CacheConfig(**kwargs)


@pytest.mark.parametrize("addresses, writes, error, match", [
    (np.array([0.0, 32.0]), None, TypeError, "addresses"),
    (np.array([True, False]), None, TypeError, "addresses"),
    (np.array([[0, 32]]), None, ValueError, "addresses must be 1-D"),
    (np.array([0, -32]), None, ValueError, "non-negative"),
    (np.array([2 ** 63 + 5], dtype=np.uint64), None, ValueError, "addresses"),
    ("0 32", None, TypeError, "addresses"),
    (7, None, TypeError, "addresses"),
    (np.array([0, 32]), np.array([True]), ValueError, "writes has length 1"),
    (np.array([0, 32]), np.array([0.5, 1.0]), TypeError, "writes"),
    (np.array([0, 32]), np.array([0, 2]), ValueError, "writes"),
    (np.array([0, 32]), np.array([[True, False]]), ValueError, "writes must be 1-D"),
])
def test_bad_trace_input(addresses, writes, error, match):
    with pytest.raises(error, match=match):
        simulate_trace(addresses, CacheConfig(1024, 2), writes)


def test_bad_config_argument():
    with pytest.raises(TypeError, match="config must be a CacheConfig"):
        simulate_trace(np.array([0]), {"size_bytes": 1024, "ways": 2})
