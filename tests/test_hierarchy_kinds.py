"""simcore.Hierarchy's request kinds: ld (0), store (1), cp.async.cg (2, bypasses the L1) and
cp.async.ca (3, a load counted under the ldgsts cache-access keys), against NaiveHierarchy on every
path, on hand-made cases and on the conservation laws."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simcore import CacheConfig, Hierarchy
from simcore import metrics as M
from tests.test_hierarchy import (conv_stream, feed_in_chunks, hierarchies, make_requests,  # noqa: F401
                                  naive_and_every_mode, one_request_each, v100_hierarchy)

LD, ST, CG, CA = M.KIND_LD, M.KIND_ST, M.KIND_CP_ASYNC_CG, M.KIND_CP_ASYNC_CA
# probabilities of kinds 0..3: SIMT-like, tensor-op-like (A .ca, B .cg, C stores), and only cp.async
MIXES = [(0.7, 0.1, 0.1, 0.1), (0.0, 0.1, 0.45, 0.45), (0.0, 0.0, 0.5, 0.5), (0.25, 0.25, 0.25, 0.25)]


@settings(max_examples=40)
@given(hierarchies(), st.integers(0, 2 ** 32 - 1), st.sampled_from([16, 64, 400]), st.integers(1, 3),
       st.sampled_from(MIXES))
def test_mixed_kinds_match_the_naive_hierarchy_in_every_mode(geometry, seed, span, chunks, mix):
    rng = np.random.default_rng(seed)
    chunks = [make_requests(rng, int(rng.integers(0, 120)), geometry["sms"], span,
                            sector_bytes=geometry["l1"].sector_bytes, kinds=mix) for _ in range(chunks)]
    expected, results = naive_and_every_mode(geometry, chunks)
    for mode, got in results.items():
        assert got == expected, mode


# ---- hand-made cases ---------------------------------------------------------------------------

def small():
    """One SM; L1 of 2 sets x 2 ways, one L2 slice of 2 sets x 2 ways (nothing is evicted below)."""
    return Hierarchy(CacheConfig(512, 2), 1, CacheConfig(512, 2), 1, "linear")


def counts(h, keys):
    m = h.metrics()
    return tuple(m[key] for key in keys)


@pytest.mark.parametrize("mode", ["issue", "bucketed", "parallel"])
def test_a_bypass_read_hits_the_l2_line_a_load_brought_in(mode):
    # ld A of sector 0: L1 miss, L2 miss (one DRAM read). cp.async.cg B of sectors 0 and 32: no L1
    # lookup; sector 0 hits in L2 (the load filled it), sector 32 is a sector miss of the same line.
    h = small()
    h._mode = mode
    h.feed(*one_request_each((0, 0, LD, [0]), (0, 1, CG, [0, 32])))
    m = h.metrics()
    assert (m[M.L1_LD_REQUESTS], m[M.L1_LD_SECTORS], m[M.L1_LD_MISSES]) == (1, 1, 1)
    assert (m[M.L1_LDGSTS_BYPASS_REQUESTS], m[M.L1_LDGSTS_BYPASS_SECTORS]) == (1, 2)
    assert m[M.operand_key(M.L1_LDGSTS_BYPASS_SECTORS, "B")] == 2
    assert (m[M.L2_RD_SECTORS], m[M.L2_RD_HITS], m[M.L2_RD_MISSES]) == (3, 1, 2)
    assert m[M.operand_key(M.L2_RD_HITS, "B")] == 1 and m[M.operand_key(M.DRAM_RD_SECTORS, "B")] == 1
    assert m[M.DRAM_RD_SECTORS] == 2
    assert m[M.L1_LDGSTS_ACCESS_SECTORS] == 0 and m[M.L1_ST_SECTORS] == 0


@pytest.mark.parametrize("mode", ["issue", "bucketed", "parallel"])
def test_a_load_after_a_bypass_of_the_same_sector_misses_in_l1(mode):
    # cp.async.cg of sector 64: L2 miss. ld of sector 64: the bypass allocated nothing in L1, so an L1
    # miss, then an L2 hit. A second ld hits in L1.
    h = small()
    h._mode = mode
    h.feed(*one_request_each((0, 1, CG, [64]), (0, 1, LD, [64]), (0, 1, LD, [64])))
    assert counts(h, (M.L1_LD_SECTORS, M.L1_LD_HITS, M.L1_LD_MISSES)) == (2, 1, 1)
    assert counts(h, (M.L2_RD_SECTORS, M.L2_RD_HITS, M.L2_RD_MISSES, M.DRAM_RD_SECTORS)) == (2, 1, 1, 1)


@pytest.mark.parametrize("mode", ["issue", "bucketed", "parallel"])
def test_cp_async_ca_allocates_in_l1_like_a_load(mode):
    # .ca of sector 128: L1 miss (ldgsts cache-access miss), L2 miss. ld of 128: L1 hit (the .ca
    # allocated). .ca of 128 again: L1 hit. Two bypasses of 128 leave the L1 alone: still 2 hits.
    h = small()
    h._mode = mode
    h.feed(*one_request_each((0, 0, CA, [128]), (0, 0, LD, [128]), (0, 0, CA, [128]), (0, 0, CG, [128]),
                             (0, 0, CG, [128])))
    assert counts(h, (M.L1_LDGSTS_ACCESS_REQUESTS, M.L1_LDGSTS_ACCESS_SECTORS, M.L1_LDGSTS_ACCESS_HITS,
                      M.L1_LDGSTS_ACCESS_MISSES)) == (2, 2, 1, 1)
    assert counts(h, (M.L1_LD_SECTORS, M.L1_LD_HITS, M.L1_LD_MISSES)) == (1, 1, 0)
    assert counts(h, (M.L2_RD_SECTORS, M.L2_RD_HITS, M.L2_RD_MISSES)) == (3, 2, 1)


def test_a_bypass_never_evicts_from_l1():
    # L1: one set of 2 ways. ld of lines 0 and 1 fill it; bypasses of lines 2..5 must not evict them
    h = Hierarchy(CacheConfig(256, 2), 1, CacheConfig(2048, 4), 1, "linear")
    h.feed(*one_request_each((0, 0, LD, [0]), (0, 0, LD, [128]), *[(0, 1, CG, [line * 128]) for line in range(2, 6)],
                             (0, 0, LD, [0]), (0, 0, LD, [128])))
    assert counts(h, (M.L1_LD_SECTORS, M.L1_LD_HITS)) == (4, 2)


def test_a_bypass_reads_a_sector_a_store_wrote():
    # store C of sector 0 (L2 write, dirty); cp.async.cg of sector 0: an L2 read hit, no DRAM read
    h = small()
    h.feed(*one_request_each((0, 2, ST, [0]), (0, 1, CG, [0])))
    assert counts(h, (M.L2_WR_SECTORS, M.L2_RD_SECTORS, M.L2_RD_HITS, M.DRAM_RD_SECTORS)) == (1, 1, 1, 0)
    assert h.metrics()[M.L2_DIRTY_AT_END] == 1


# ---- conservation laws on a real stream ----------------------------------------------------------

def with_kinds(stream):
    """The conv stream with every 7th request a store of C, every 3rd of the rest cp.async.cg and
    every 5th cp.async.ca."""
    req_sm, req_op, req_kind, first, count, sectors = stream
    req_kind = req_kind.copy()
    req_op = req_op.copy()
    index = np.arange(req_kind.shape[0])
    req_kind[index % 5 == 0] = CA
    req_kind[index % 3 == 0] = CG
    req_kind[index % 7 == 0] = ST
    req_op[index % 7 == 0] = 2
    return req_sm, req_op, req_kind, first, count, sectors


def test_conservation_laws_with_every_kind(conv_stream):  # noqa: F811
    stream = with_kinds(conv_stream)
    h = v100_hierarchy()
    feed_in_chunks(h, stream, 5000)
    m = h.metrics()
    kinds, count = stream[2], stream[4]
    for kind, keys in enumerate(M.KIND_KEYS):
        assert m[keys[0]] == (kinds == kind).sum() and m[keys[1]] == count[kinds == kind].sum(), M.KINDS[kind]
        if len(keys) == 4:
            assert m[keys[2]] + m[keys[3]] == m[keys[1]] and m[keys[2]] > 0, M.KINDS[kind]
    assert m[M.L2_RD_SECTORS] == m[M.L1_LD_MISSES] + m[M.L1_LDGSTS_ACCESS_MISSES] + m[M.L1_LDGSTS_BYPASS_SECTORS]
    assert m[M.L2_RD_HITS] + m[M.L2_RD_MISSES] == m[M.L2_RD_SECTORS] == sum(
        m[M.operand_key(M.L2_RD_SECTORS, op)] for op in M.OPERANDS)
    assert m[M.DRAM_RD_SECTORS] == m[M.L2_RD_MISSES]
    assert m[M.L2_WR_SECTORS] == m[M.L1_ST_SECTORS]
    for key in M.METRICS:
        assert m[key] == sum(m[M.operand_key(key, op)] for op in M.OPERANDS), key
    assert set(m) == set(M.all_keys())


def test_serial_parallel_and_chunking_agree_with_every_kind(conv_stream):  # noqa: F811
    stream = with_kinds(conv_stream)
    results = []
    for mode, chunk in (("issue", 1 << 30), ("bucketed", 3000), ("parallel", 777)):
        h = v100_hierarchy()
        h._mode = mode
        feed_in_chunks(h, stream, chunk)
        results.append(h.metrics())
    assert all(r == results[0] for r in results[1:])


def test_a_load_and_store_stream_counts_nothing_under_ldgsts(conv_stream):  # noqa: F811
    h = v100_hierarchy()
    feed_in_chunks(h, conv_stream, 5000)
    m = h.metrics()
    assert all(m[key] == 0 for key in M.LDGSTS_METRICS) and m[M.L1_LD_SECTORS] > 0
