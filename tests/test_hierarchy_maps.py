"""The bucketed paths' line -> slot maps: their limit, the switch to hash tables, and mode changes."""
import numpy as np
import pytest

from simcore import CacheConfig, Hierarchy
from simcore import hierarchy as H
from tests.naive_cache import NaiveHierarchy
from tests.test_hierarchy import MODES, make_requests

def geometry(slices):
    """Small caches; the L2 keys are line // slices with 4 slices and lines with 5
    (``_phases._l2_key_set``)."""
    return dict(l1=CacheConfig(2 * 3 * 128, 3), sms=3, l2_slice=CacheConfig(2 * 2 * 128, 2, index="xor"),
                l2_slices=slices, slice_hash="xor")


SLICES = pytest.mark.parametrize("slices", [4, 5])


def shifted(chunk, offset):
    """``chunk`` with every sector address moved up by ``offset`` bytes."""
    return chunk[:5] + (chunk[5] + offset,)


@SLICES
def test_a_chunk_beyond_the_maps_switches_to_hash_tables_for_good(monkeypatch, slices):
    # maps limited to 64 lines (8 KB of addresses): two chunks inside, one reaching 2**47 - 32 (the
    # highest address feed accepts), then chunks inside again, which stay on the hash tables
    monkeypatch.setattr(H, "_MAP_MAX_LINES", 64)
    rng = np.random.default_rng(3)
    low = [make_requests(rng, 150, 3, 200) for _ in range(4)]
    far = shifted(make_requests(rng, 150, 3, 200), (1 << 47) - 32 * 208)
    assert far[5].max() < 1 << 47 and low[0][5].max() < 64 * 128
    for mode in MODES:
        naive, h = NaiveHierarchy(**geometry(slices)), Hierarchy(**geometry(slices))
        h._mode = mode
        hashed = []
        for chunk in (low[0], low[1], far, low[2], low[3]):
            naive.feed(*chunk)
            h.feed(*chunk)
            hashed.append(h._hashed)
            assert h.metrics() == naive.metrics(), mode
        if mode == "issue":                               # never uses the maps
            assert hashed == [False] * 5
        else:
            assert hashed == [False, False, True, True, True]
            assert h._maps.size == 0                       # given back


@SLICES
def test_modes_may_change_from_chunk_to_chunk(slices):
    # the hash tables go stale while the maps are in use and are rebuilt from the slots' lines when
    # the issue-order path comes back; the addresses grow at first, so the maps grow too; counts stay
    # those of the naive hierarchy throughout
    rng = np.random.default_rng(5)
    naive, h = NaiveHierarchy(**geometry(slices)), Hierarchy(**geometry(slices))
    order = ["issue", "bucketed", "issue", "parallel", "issue", "issue", "bucketed", "parallel", "parallel",
             "issue"]
    for step, mode in enumerate(order):
        chunk = make_requests(rng, 300, 3, 300 + 200 * min(step, 3))      # the same range from step 3
        h._mode = mode
        naive.feed(*chunk)
        h.feed(*chunk)
        assert h.metrics() == naive.metrics(), mode
        assert (h._maps == -1).all()                   # every phase leaves the maps empty


@pytest.mark.parametrize("top_line", [10, 1000, 40000])
def test_maps_grow_with_the_highest_address_and_no_further(top_line):
    h = Hierarchy(**geometry(4))
    h._mode = "bucketed"
    h.feed(np.zeros(1, np.int32), np.zeros(1, np.uint8), np.zeros(1, np.uint8), np.zeros(1, np.int64),
           np.ones(1, np.int32), np.array([top_line * 128], np.int64))
    assert h._maps.shape == (1, top_line + 1)        # one row (serial), lines 0 .. top_line
    assert h._maps.dtype == np.int16
    h.feed(np.zeros(1, np.int32), np.zeros(1, np.uint8), np.zeros(1, np.uint8), np.zeros(1, np.int64),
           np.ones(1, np.int32), np.array([(top_line + 1) * 128], np.int64))
    assert h._maps.shape == (1, (top_line + 1) * 3 // 2)   # grown by half, not one line at a time


def test_caches_of_more_than_8192_lines_get_int32_maps():
    big = CacheConfig(8193 * 128, 8193)       # one set of 8193 ways: int32 slot numbers
    h = Hierarchy(CacheConfig(256, 2), 1, big, 1)
    h._mode = "bucketed"
    rng = np.random.default_rng(9)
    naive = NaiveHierarchy(CacheConfig(256, 2), 1, big, 1)
    chunk = make_requests(rng, 200, 1, 20000)
    naive.feed(*chunk)
    h.feed(*chunk)
    assert h._maps.dtype == np.int32
    assert h.metrics() == naive.metrics()
