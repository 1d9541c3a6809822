"""Metric keys (Nsight Compute names, DESIGN section 5) shared by the simulator, the model and reports.

Per-operand breakdowns use the suffixes ``:A`` (input), ``:B`` (filter), ``:C`` (output), e.g.
``l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum:A``.

``cp.async`` (SASS ``LDGSTS``, sm_80 and later) is counted apart from ``ld``, under ``op_ldgsts`` with
``_cache_access`` (``cp.async.ca``: looked up and allocated in the L1 like a load) or ``_cache_bypass``
(``cp.async.cg``: not looked up in the L1). Its sectors still reach the L2 from the L1TEX unit, so
the L2 read keys (``lts__t_sectors_srcunit_tex_op_read*``) and the DRAM keys count every kind of
load and stay comparable between SIMT and tensor-op kernels.

Where the ldgsts names were found (no ``ncu --query-metrics`` listing for sm_80 / sm_90 was among the
sources at hand, and no GPU was lent to the task; public ncu command lines and measurement notes):
``l1tex__t_{requests,sectors}_pipe_lsu_mem_global_op_ldgsts.sum`` and
``l1tex__t_{requests,sectors}_pipe_lsu_mem_global_op_ldgsts_cache_access.sum`` in ncu ``--metrics``
lists of cp.async benchmarks; the ``_cache_access`` sectors' ``_lookup_hit`` variant in a cp.async
characterisation measured with ncu on sm_120 (CUDA 13.1); the SASS-patched
``sm__sass_l1tex_t_{requests,sectors}_pipe_lsu_mem_global_op_ldgsts_cache_{access,bypass}.sum`` and
``sm__sass_inst_executed_op_ldgsts_cache_{access,bypass}.sum`` in several public ncu metric lists.
``..._cache_access_lookup_miss`` and the hardware-counter form of the bypass pair
(``l1tex__t_..._op_ldgsts_cache_bypass.sum``) were not seen in those sources: they follow ncu's naming
rule (as ``op_ld`` has ``_lookup_hit`` / ``_lookup_miss``); an export may carry the ``sm__sass_``
form of the bypass pair instead, which these keys do not match.
"""

L1_LD_REQUESTS = "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"
L1_LD_SECTORS = "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"
L1_LD_HITS = "l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum"
L1_LD_MISSES = "l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_miss.sum"
L1_ST_REQUESTS = "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum"
L1_ST_SECTORS = "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"
# cp.async.ca: looked up (and allocated) in the L1 like a load
L1_LDGSTS_ACCESS_REQUESTS = "l1tex__t_requests_pipe_lsu_mem_global_op_ldgsts_cache_access.sum"
L1_LDGSTS_ACCESS_SECTORS = "l1tex__t_sectors_pipe_lsu_mem_global_op_ldgsts_cache_access.sum"
L1_LDGSTS_ACCESS_HITS = "l1tex__t_sectors_pipe_lsu_mem_global_op_ldgsts_cache_access_lookup_hit.sum"
L1_LDGSTS_ACCESS_MISSES = "l1tex__t_sectors_pipe_lsu_mem_global_op_ldgsts_cache_access_lookup_miss.sum"
# cp.async.cg: bypasses the L1 (every sector goes to the L2 as a read)
L1_LDGSTS_BYPASS_REQUESTS = "l1tex__t_requests_pipe_lsu_mem_global_op_ldgsts_cache_bypass.sum"
L1_LDGSTS_BYPASS_SECTORS = "l1tex__t_sectors_pipe_lsu_mem_global_op_ldgsts_cache_bypass.sum"
L2_RD_SECTORS = "lts__t_sectors_srcunit_tex_op_read.sum"
L2_RD_HITS = "lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum"
L2_RD_MISSES = "lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum"
L2_WR_SECTORS = "lts__t_sectors_srcunit_tex_op_write.sum"
L2_WR_HITS = "lts__t_sectors_srcunit_tex_op_write_lookup_hit.sum"
L2_WR_MISSES = "lts__t_sectors_srcunit_tex_op_write_lookup_miss.sum"
DRAM_RD_SECTORS = "dram__sectors_read.sum"
DRAM_WR_SECTORS = "dram__sectors_write.sum"
# Not an Nsight Compute metric: dirty L2 sectors still resident when the kernel ends (DESIGN section 4).
L2_DIRTY_AT_END = "sim__l2_dirty_sectors_at_end.sum"

LDGSTS_METRICS = (L1_LDGSTS_ACCESS_REQUESTS, L1_LDGSTS_ACCESS_SECTORS, L1_LDGSTS_ACCESS_HITS,
                  L1_LDGSTS_ACCESS_MISSES, L1_LDGSTS_BYPASS_REQUESTS, L1_LDGSTS_BYPASS_SECTORS)
METRICS = (L1_LD_REQUESTS, L1_LD_SECTORS, L1_LD_HITS, L1_LD_MISSES, L1_ST_REQUESTS, L1_ST_SECTORS,
           *LDGSTS_METRICS,
           L2_RD_SECTORS, L2_RD_HITS, L2_RD_MISSES, L2_WR_SECTORS, L2_WR_HITS, L2_WR_MISSES,
           DRAM_RD_SECTORS, DRAM_WR_SECTORS, L2_DIRTY_AT_END)
OPERANDS = ("A", "B", "C")

# Request kinds of ``simcore.Hierarchy.feed`` (``req_kind``): a global load through the L1 (``ld``), a
# global store, ``cp.async.cg`` (bypasses the L1) and ``cp.async.ca`` (through the L1, like ``ld``).
KIND_LD, KIND_ST, KIND_CP_ASYNC_CG, KIND_CP_ASYNC_CA = range(4)
KINDS = ("ld", "st", "cp.async.cg", "cp.async.ca")
# L1 keys of each kind: requests, sectors, then (kinds looked up in the L1) sector hits and misses
KIND_KEYS = ((L1_LD_REQUESTS, L1_LD_SECTORS, L1_LD_HITS, L1_LD_MISSES),
             (L1_ST_REQUESTS, L1_ST_SECTORS),
             (L1_LDGSTS_BYPASS_REQUESTS, L1_LDGSTS_BYPASS_SECTORS),
             (L1_LDGSTS_ACCESS_REQUESTS, L1_LDGSTS_ACCESS_SECTORS, L1_LDGSTS_ACCESS_HITS,
              L1_LDGSTS_ACCESS_MISSES))


def operand_key(metric: str, operand: str) -> str:
    """``operand_key(L1_LD_SECTORS, "A") == "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum:A"``."""
    if operand not in OPERANDS:
        raise ValueError(f"operand must be one of {OPERANDS}, got {operand!r}")
    return f"{metric}:{operand}"


def all_keys() -> tuple:
    """Every total key followed by every per-operand key."""
    return METRICS + tuple(operand_key(m, op) for m in METRICS for op in OPERANDS)
