"""Metric keys (Nsight Compute names, DESIGN section 5) shared by the simulator, the model and reports.

Per-operand breakdowns use the suffixes ``:A`` (input), ``:B`` (filter), ``:C`` (output), e.g.
``l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum:A``.
"""

L1_LD_REQUESTS = "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"
L1_LD_SECTORS = "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"
L1_LD_HITS = "l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_hit.sum"
L1_LD_MISSES = "l1tex__t_sectors_pipe_lsu_mem_global_op_ld_lookup_miss.sum"
L1_ST_REQUESTS = "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum"
L1_ST_SECTORS = "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"
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

METRICS = (L1_LD_REQUESTS, L1_LD_SECTORS, L1_LD_HITS, L1_LD_MISSES, L1_ST_REQUESTS, L1_ST_SECTORS,
           L2_RD_SECTORS, L2_RD_HITS, L2_RD_MISSES, L2_WR_SECTORS, L2_WR_HITS, L2_WR_MISSES,
           DRAM_RD_SECTORS, DRAM_WR_SECTORS, L2_DIRTY_AT_END)
OPERANDS = ("A", "B", "C")


def operand_key(metric: str, operand: str) -> str:
    """``operand_key(L1_LD_SECTORS, "A") == "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum:A"``."""
    if operand not in OPERANDS:
        raise ValueError(f"operand must be one of {OPERANDS}, got {operand!r}")
    return f"{metric}:{operand}"


def all_keys() -> tuple:
    """Every total key followed by every per-operand key."""
    return METRICS + tuple(operand_key(m, op) for m in METRICS for op in OPERANDS)
