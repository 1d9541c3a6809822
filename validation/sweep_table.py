"""What a sweep shows while it runs and when it ends: the progress bar and the per-case summary table."""
from __future__ import annotations

import math
import sys

from .report import eng, eng_time, pct
from .sweep_results import case_summary

__all__ = ["SweepProgress", "simulation_cost", "summary_table"]


def simulation_cost(layer, kernel) -> float:
    """About the L1 load sectors of ``layer``'s simulation (what its time grows with): every CTA column
    reads the whole A operand, every CTA row the whole B operand."""
    ctas_m = math.ceil(layer.gemm_m / kernel.tile_m)
    ctas_n = math.ceil(layer.gemm_n / kernel.tile_n)
    elements = layer.gemm_k * (layer.gemm_m * ctas_n + layer.gemm_n * ctas_m)
    return elements * kernel.elem_bytes / 32.0


class SweepProgress:
    """A tqdm bar over the estimated work (simulation cost, or layers predicted), showing cases and
    layers done; its time left is the elapsed time scaled by the work left."""

    def __init__(self, total_cost: float, *, cases: int, layers: int, quiet: bool = False, file=None,
                 force: bool = False):
        from tqdm import tqdm
        self.cases, self.layers = cases, layers
        self.cases_done = self.layers_done = self.failed = 0
        disable = True if quiet else (False if force else None)      # None: only on a terminal
        self._bar = tqdm(total=max(float(total_cost), 1.0), desc="sweep", file=file or sys.stderr, smoothing=0.0,
                         disable=disable, dynamic_ncols=True,
                         bar_format="{desc}: {percentage:3.0f}%|{bar}| {postfix} [{elapsed}<{remaining}]")

    def advance(self, cost: float = 0.0, *, cases: int = 0, layers: int = 0, failed: int = 0) -> None:
        self.cases_done += cases
        self.layers_done += layers
        self.failed += failed
        text = f"cases {self.cases_done}/{self.cases}, layers {self.layers_done}/{self.layers}"
        self._bar.set_postfix_str(text + (f", {self.failed} failed" if self.failed else ""), refresh=False)
        self._bar.update(cost)

    def close(self) -> None:
        self._bar.close()


def summary_table(cases, records, *, simulate: bool) -> str:
    """One row per case, in sweep order: network totals (predicted time and the bound that holds most
    of it, DRAM read sectors) and, with ``simulate``, the simulated DRAM reads and the errors of the
    totals and their mean over layers; failed cases give their error, cases not run say so."""
    head = ["network", "gpu", "scale", "batch", "layers", "time", "bound", "DRAM rd"]
    if simulate:
        head += ["sim DRAM rd", "L2 rd err", "DRAM rd err", "L2 mean|err|", "DRAM mean|err|"]
    head.append("status")
    rows = []
    for index, case in enumerate(cases):
        record = records.get(index)
        summary = case_summary(record) if record is not None else {}
        row = [case["network"], case["gpu"], case["scale"] or "-", str(case["batch"]), str(len(case["layers"]))]
        row += [eng_time(summary.get("time_s")) if "time_s" in summary else "-", summary.get("bound", "-"),
                eng(summary.get("predicted_dram_read"))]
        if simulate:
            row += [eng(summary.get("simulated_dram_read")), pct(summary.get("error_l2_read")),
                    pct(summary.get("error_dram_read")), pct(summary.get("mean_abs_error_l2_read"), False),
                    pct(summary.get("mean_abs_error_dram_read"), False)]
        if record is None:
            row.append("not run")
        elif record["status"] == "done":
            row.append("done")
        else:
            row.append(f"FAILED: {record['error']}")
        rows.append(row)
    widths = [max(len(head[j]), *(len(r[j]) for r in rows)) if rows else len(head[j]) for j in range(len(head) - 1)]
    lines = ["  ".join(cell.ljust(w) if j < 3 else cell.rjust(w) for j, (cell, w) in enumerate(zip(line, widths)))
             + "  " + line[-1] for line in [head] + rows]
    return "\n".join(lines) + "\n"
