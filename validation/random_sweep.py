"""Statistics of the random-case accuracy sweep (``python -m validation.accuracy --random N``).

Per metric: the mean, 95th percentile and maximum of the absolute relative error
|predicted - simulated| / simulated over the cases (cases whose simulated count is 0 are left out
of that metric, unless the prediction is 0 too, which counts as exact), against the targets of
DESIGN section 8 / issue 13; for the L1 request and sector counts, the number of cases that are
not exact where the model claims exactness (`analytic.l1_exact`) and the worst error elsewhere
(target 1 %). Then the ten worst cases, ranked by the largest ratio of a metric's error to its
maximum target, each with the one-line command that reproduces it.
"""
from __future__ import annotations

import numpy as np

from simcore import metrics as M

__all__ = ["RANDOM_TARGETS", "case_errors", "random_stats", "format_random_report"]

#: label -> (metric key, mean target, p95 target, max target); None: no target (reported only).
RANDOM_TARGETS = {
    "L1 ld requests": (M.L1_LD_REQUESTS, None, None, None),
    "L1 ld sectors": (M.L1_LD_SECTORS, None, None, None),
    "L1 ld hits": (M.L1_LD_HITS, None, None, None),
    "L2 rd sectors": (M.L2_RD_SECTORS, 0.03, 0.10, 0.25),
    "DRAM rd sectors": (M.DRAM_RD_SECTORS, 0.05, 0.15, 0.35),
    "DRAM wr sectors": (M.DRAM_WR_SECTORS, None, None, None),
}
L1_EXACT_LABELS = ("L1 ld requests", "L1 ld sectors")
L1_APPROX_TARGET = 0.01
#: Metrics broken down by op (fprop, dgrad, wgrad) under the main table.
BY_OP_LABELS = ("L2 rd sectors", "DRAM rd sectors")
_OP_ORDER = ("fprop", "dgrad", "wgrad")


def _error(pred, sim):
    pred, sim = float(pred), float(sim)
    if sim == 0:
        return 0.0 if pred == 0 else None
    return abs(pred - sim) / sim


def case_errors(sim: dict, pred: dict) -> dict:
    """{label: absolute relative error or None (undefined)} for one case."""
    return {label: _error(pred[key], sim[key]) for label, (key, *_rest) in RANDOM_TARGETS.items()}


def random_stats(cases, simulated, predicted, exact_flags) -> dict:
    """Summary of the sweep: ``{"metrics": {label: {...}}, "cases": [...], "ok": bool}``.

    ``exact_flags[i]``: whether the model claims exact L1 counts for case i."""
    rows = []
    for case, sim, pred, exact in zip(cases, simulated, predicted, exact_flags):
        rows.append({"case": case, "errors": case_errors(sim, pred), "exact_l1": bool(exact),
                     "sim": sim, "pred": pred})
    metrics = {}
    all_ok = True
    for label, (key, t_mean, t_p95, t_max) in RANDOM_TARGETS.items():
        errs = np.array([r["errors"][label] for r in rows if r["errors"][label] is not None], dtype=float)
        entry = {"count": int(errs.size), "mean": float(errs.mean()) if errs.size else None,
                 "p95": float(np.percentile(errs, 95)) if errs.size else None,
                 "max": float(errs.max()) if errs.size else None,
                 "targets": (t_mean, t_p95, t_max)}
        if label in L1_EXACT_LABELS:
            inexact = [r for r in rows if r["exact_l1"] and round(float(r["pred"][key])) != int(r["sim"][key])]
            approx = [r["errors"][label] for r in rows if not r["exact_l1"] and r["errors"][label] is not None]
            entry["not_exact"] = len(inexact)
            entry["claimed_exact"] = sum(1 for r in rows if r["exact_l1"])
            entry["approx_max"] = max(approx) if approx else None
            entry["ok"] = not inexact and (not approx or max(approx) <= L1_APPROX_TARGET)
        elif t_mean is None:
            entry["ok"] = None
        else:
            entry["ok"] = bool(errs.size and entry["mean"] <= t_mean and entry["p95"] <= t_p95
                               and entry["max"] <= t_max)
        if entry["ok"] is False:
            all_ok = False
        metrics[label] = entry
    for r in rows:
        score = 0.0
        for label, (_key, _m, _p, t_max) in RANDOM_TARGETS.items():
            e = r["errors"][label]
            if e is None:
                continue
            if label in L1_EXACT_LABELS:
                score = max(score, e / L1_APPROX_TARGET)
            elif t_max is not None:
                score = max(score, e / t_max)
        r["score"] = score
    by_op = {}
    for op in sorted({getattr(r["case"].kernel, "op", "fprop") for r in rows}, key=_OP_ORDER.index):
        mine = [r for r in rows if getattr(r["case"].kernel, "op", "fprop") == op]
        by_op[op] = {"count": len(mine)}
        for label in BY_OP_LABELS:
            errs = np.array([r["errors"][label] for r in mine if r["errors"][label] is not None], dtype=float)
            by_op[op][label] = (None if not errs.size else
                                {"mean": float(errs.mean()), "p95": float(np.percentile(errs, 95)),
                                 "max": float(errs.max())})
    return {"metrics": metrics, "cases": rows, "ok": all_ok, "by_op": by_op}


def _pct(x):
    return "n/a" if x is None else f"{100 * x:.1f}%"


def format_random_report(stats: dict, *, worst: int = 10, title: str = "", factors: str | None = None,
                         max_sectors: int | None = None) -> str:
    """The per-metric table (Markdown) and the worst cases with their commands (naming ``factors`` and
    ``max_sectors``, as `RandomCase.command`)."""
    out = []
    if title:
        out.append(title)
        out.append("")
    out.append("| metric | cases | mean | p95 | max | target (mean / p95 / max) | met |")
    out.append("| --- | --- | --- | --- | --- | --- | --- |")
    for label, e in stats["metrics"].items():
        t_mean, t_p95, t_max = e["targets"]
        if label in L1_EXACT_LABELS:
            target = (f"exact on the {e['claimed_exact']} claimed ({e['not_exact']} not), "
                      f"<= 1% elsewhere")
        elif t_mean is None:
            target = "none"
        else:
            target = f"{_pct(t_mean)} / {_pct(t_p95)} / {_pct(t_max)}"
        met = "" if e["ok"] is None else ("✓" if e["ok"] else "✗")
        out.append(f"| {label} | {e['count']} | {_pct(e['mean'])} | {_pct(e['p95'])} | {_pct(e['max'])} | "
                   f"{target} | {met} |")
    by_op = stats.get("by_op") or {}
    if len(by_op) > 1:
        out.append("")
        out.append("| op | cases | " + " | ".join(f"{label} mean / p95 / max" for label in BY_OP_LABELS) + " |")
        out.append("| --- | --- |" + " --- |" * len(BY_OP_LABELS))
        for op, row in by_op.items():
            cells = [("n/a" if row[label] is None else
                      f"{_pct(row[label]['mean'])} / {_pct(row[label]['p95'])} / {_pct(row[label]['max'])}")
                     for label in BY_OP_LABELS]
            out.append(f"| {op} | {row['count']} | " + " | ".join(cells) + " |")
    ranked = sorted(stats["cases"], key=lambda r: -r["score"])[:worst]
    if ranked:
        out.append("")
        out.append(f"{len(ranked)} worst cases (largest error / max target):")
        for r in ranked:
            case = r["case"]
            errs = ", ".join(f"{label.split()[0]} {label.split()[1]} {_pct(r['errors'][label])}"
                             for label in ("L2 rd sectors", "DRAM rd sectors") if r["errors"][label] is not None)
            l1 = r["errors"]["L1 ld sectors"]
            if l1:
                errs += f", L1 sectors {_pct(l1)}"
            out.append(f"  #{case.index:<4d} {errs}")
            out.append(f"        {case.describe()}")
            out.append(f"        {case.command(factors, max_sectors)}")
    return "\n".join(out) + "\n"
