"""Text tables and plots of compare results (the documents of `validation.results`)."""
from __future__ import annotations

import math

from simcore import metrics as M

__all__ = ["TABLE_METRICS", "SUMMARY_METRICS", "eng", "eng_time", "pct", "layer_table", "totals_table",
           "error_table", "passes_table", "step_layer_table", "format_header", "format_document", "plot_document", "panel_notes", "check_matplotlib"]

#: (label, key, kind) of the rows of every per-layer table; kind "count" or "rate".
TABLE_METRICS = (
    ("L1 load requests", M.L1_LD_REQUESTS, "count"),
    ("L1 load sectors", M.L1_LD_SECTORS, "count"),
    ("L1 cp.async.ca sec", M.L1_LDGSTS_ACCESS_SECTORS, "count"),
    ("L1 cp.async.cg sec", M.L1_LDGSTS_BYPASS_SECTORS, "count"),
    ("L1 hit rate", "l1_hit_rate", "rate"),
    ("L2 read sectors", M.L2_RD_SECTORS, "count"),
    ("L2 hit rate", "l2_hit_rate", "rate"),
    ("DRAM read sectors", M.DRAM_RD_SECTORS, "count"),
    ("DRAM write sectors", M.DRAM_WR_SECTORS, "count"),
)
#: Rows left out of a table where neither side has any (cp.async: tensor-op kernels only).
_OPTIONAL_ROWS = (M.L1_LDGSTS_ACCESS_SECTORS, M.L1_LDGSTS_BYPASS_SECTORS)


def _absent(key, *counts) -> bool:
    """An optional row (cp.async sectors) that none of ``counts`` (metric dicts or None) has."""
    return key in _OPTIONAL_ROWS and not any((c or {}).get(key) for c in counts)
#: Keys summarised (mean / worst absolute relative error) over the layers: table rows, then the rest.
SUMMARY_METRICS = tuple(key for _, key, _ in TABLE_METRICS) + tuple(
    key for key in M.METRICS if key not in {k for _, k, _ in TABLE_METRICS})
_LABELS = {key: label for label, key, _ in TABLE_METRICS}

_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def _sig3(value: float) -> str:
    """Three significant digits, no exponent, for 1 <= |value| < 1000 (or smaller)."""
    value = float(f"{value:.3g}")
    mag = abs(value)
    if mag >= 100:
        return f"{value:.0f}"
    if mag >= 10:
        return f"{value:.1f}"
    if mag >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def eng(value) -> str:
    """Engineering notation with 3 significant digits: 12345678 -> '12.3M', 950 -> '950', None -> '-'."""
    if value is None:
        return "-"
    try:
        value = float(value)
    except (TypeError, ValueError):
        return str(value)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value == 0:
        return "0"
    mag = abs(value)
    for scale, prefix in _PREFIXES:
        if mag >= scale * 0.9995:
            text = _sig3(value / scale)
            if abs(float(text)) >= 1000:          # rounding carried into the next prefix
                continue
            return text + prefix
    if mag >= 1 and value == int(value):
        return str(int(value))
    return _sig3(value)


def eng_time(seconds) -> str:
    """'12.3 us', '4.56 ms', '1.20 s'."""
    if seconds is None:
        return "-"
    seconds = float(seconds)
    if seconds == 0 or not math.isfinite(seconds):
        return f"{seconds:g} s"
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")):
        if abs(seconds) >= scale * 0.9995:
            return f"{_sig3(seconds / scale)} {unit}"
    return f"{seconds:.3g} s"


def pct(value, signed=True) -> str:
    """Relative error as a percentage: 0.0123 -> '+1.2%'; None -> 'n/a'."""
    if value is None:
        return "n/a"
    value = float(value) * 100
    if not math.isfinite(value):
        return "n/a"
    if abs(value) < 0.05:
        value = 0.0
    return f"{value:+.1f}%" if signed else f"{value:.1f}%"


def _value(kind, value) -> str:
    if kind == "rate":
        return "-" if value is None else f"{100 * float(value):.1f}%"
    return eng(value)


def _layer_line(layer: dict) -> str:
    if not layer:
        return ""
    parts = [f"{f}={layer[f]}" for f in ("n", "c", "h", "w", "k", "r", "s") if f in layer]
    for field in ("stride", "pad", "dilation"):
        value = layer.get(field)
        if value is None:
            continue
        value = list(value) if isinstance(value, (list, tuple)) else [value, value]
        if field == "dilation" and value == [1, 1]:
            continue
        parts.append(f"{field}={value[0] if value[0] == value[1] else 'x'.join(map(str, value))}")
    return " ".join(parts)


def _metric_table(simulated, predicted, errors, measured=None, measured_errors=None, indent="  ") -> list:
    head = f"{indent}{'metric':<20}{'simulated':>11}{'predicted':>11}{'error':>9}"
    with_meas = measured is not None
    if with_meas:
        head += f"{'measured':>11}{'sim err':>9}{'pred err':>9}"
    lines = [head]
    for label, key, kind in TABLE_METRICS:
        if _absent(key, simulated, predicted):
            continue
        line = (f"{indent}{label:<20}{_value(kind, simulated.get(key)):>11}"
                f"{_value(kind, predicted.get(key)):>11}{pct(errors.get(key)):>9}")
        if with_meas:
            me = measured_errors or {}
            line += (f"{_value(kind, measured.get(key)):>11}{pct((me.get('simulated') or {}).get(key)):>9}"
                     f"{pct((me.get('predicted') or {}).get(key)):>9}")
        lines.append(line)
    return lines


def layer_table(entry: dict) -> str:
    """The table of one layer of a compare document."""
    predicted = entry.get("predicted") or {}
    title = f"layer {entry.get('name') or '?'}"
    params = _layer_line(entry.get("layer") or {})
    timing = []
    if predicted.get("time_s") is not None:
        timing.append(f"predicted {eng_time(predicted['time_s'])}")
    if predicted.get("bound"):
        timing.append(f"{predicted['bound']}-bound")
    header = "  ".join(part for part in (title, params, ", ".join(timing)) if part)
    measured = entry.get("measured")
    lines = [header] + _metric_table(entry.get("simulated") or {}, predicted, entry.get("errors") or {},
                                     measured, entry.get("measured_errors"))
    return "\n".join(lines)


def totals_table(summary: dict) -> str:
    totals = summary.get("totals") or {}
    lines = [f"network total ({summary.get('layers', 0)} layers)  predicted "
             f"{eng_time(summary.get('predicted_time_s'))}"]
    measured = totals.get("measured")
    lines += _metric_table(totals.get("simulated") or {}, totals.get("predicted") or {},
                           summary.get("total_errors") or {}, measured, summary.get("total_measured_errors"))
    return "\n".join(lines)


def _stats_rows(stats: dict, width: int, indent="  ", skip=()) -> list:
    lines = []
    for label, key, _ in TABLE_METRICS:
        row = stats.get(key) or {}
        if key in skip:
            continue
        lines.append(f"{indent}{label:<{width}}{pct(row.get('mean_abs'), False):>12}"
                     f"{pct(row.get('worst_abs'), False):>13}  {row.get('worst_layer') or '-'}")
    return lines


def error_table(summary: dict) -> str:
    """Mean and worst absolute relative error per metric over the layers."""
    measured = summary.get("measured_errors") or {}
    width = max(len(label) for label, _, _ in TABLE_METRICS) + 2
    head = f"  {'metric':<{width}}{'mean |err|':>12}{'worst |err|':>13}  worst layer"
    lines = ["relative error of the prediction vs simulation, over layers (hit rates: difference in "
             "percentage points; every metric: --json)", head]
    totals = summary.get("totals") or {}
    skip = [key for key in _OPTIONAL_ROWS
            if not (totals.get("simulated") or {}).get(key) and not (totals.get("predicted") or {}).get(key)]
    lines += _stats_rows(summary.get("errors") or {}, width, skip=skip)
    for which in ("simulated", "predicted"):
        if measured.get(which):
            lines += ["", f"relative error of the {which} values vs measured (ncu), over layers", head]
            lines += _stats_rows(measured[which], width, skip=skip)
    return "\n".join(lines)


def _pass_timing(predicted: dict) -> str:
    text = eng_time(predicted.get("time_s"))
    return f"{text} {predicted['bound']}" if predicted.get("bound") else text


def passes_table(title: str, passes: list, step: dict, indent="  ") -> str:
    """One table of a layer's (or the network's) passes side by side and their sum (the training step).

    ``passes``: ``[(op, simulated, predicted)]``; ``step``: ``{"simulated", "predicted", "errors"}``."""
    step_pred = step.get("predicted") or {}
    timing = ", ".join(f"{op} {_pass_timing(pred)}" for op, _sim, pred in passes)
    head = f"{title}  step predicted {_pass_timing(step_pred)}" + (f"-bound ({timing})" if step_pred.get("bound")
                                                                   else f" ({timing})")
    cols = f"{indent}{'metric':<20}" + "".join(f"{op + ' sim':>10}{'pred':>8}" for op, _s, _p in passes)
    lines = [head, cols + f"{'step sim':>10}{'pred':>8}{'error':>8}"]
    for label, key, kind in TABLE_METRICS:
        if _absent(key, *(counts for _op, sim, pred in passes for counts in (sim, pred))):
            continue                                  # cp.async rows only where a pass has such loads
        line = f"{indent}{label:<20}"
        for _op, sim, pred in passes:
            line += f"{_value(kind, (sim or {}).get(key)):>10}{_value(kind, pred.get(key)):>8}"
        line += (f"{_value(kind, (step.get('simulated') or {}).get(key)):>10}{_value(kind, step_pred.get(key)):>8}"
                 f"{pct((step.get('errors') or {}).get(key)):>8}")
        lines.append(line)
    return "\n".join(lines)


def step_layer_table(step: dict, entries: list) -> str:
    """`passes_table` of one layer: its entries (one per pass) and their sum ``step`` (`layer_steps`)."""
    params = _layer_line(step.get("layer") or {})
    title = f"layer {step.get('name') or '?'}" + (f"  {params}" if params else "")
    return passes_table(title, [(e.get("op") or "fprop", e.get("simulated"), e.get("predicted") or {})
                                for e in entries], step)


def _step_document_lines(doc: dict, layers: bool) -> list:
    summary = doc.get("summary") or {}
    entries = doc.get("layers") or []
    out = []
    if layers:
        for step in summary.get("steps") or []:
            group = [e for e in entries if e["name"] == step["name"]]
            out += [step_layer_table(step, group), ""]
    passes = summary.get("passes") or {}
    totals = summary.get("totals") or {}
    net = [(op, (part.get("totals") or {}).get("simulated"), (part.get("totals") or {}).get("predicted") or {})
           for op, part in passes.items()]
    out += [passes_table(f"network total ({len(summary.get('steps') or [])} layers)", net,
                         {"simulated": totals.get("simulated"), "predicted": totals.get("predicted") or {},
                          "errors": summary.get("total_errors")}), ""]
    for op, part in passes.items():
        out += [f"{op}: relative error of the prediction vs simulation, over layers",
                error_table(part).split("\n", 1)[1], ""]
    out.append(error_table(summary).replace("over layers", "over layers and passes", 1))
    return out


def format_header(doc: dict) -> str:
    """First line of a report: network, GPU, batch, kernel (and INCOMPLETE when interrupted)."""
    gpu = (doc.get("gpu") or {}).get("name", "?")
    kernel = doc.get("kernel") or {}
    tile = "x".join(str(kernel.get(f, "?")) for f in ("tile_m", "tile_n", "tile_k"))
    op = doc.get("op") or kernel.get("op") or "fprop"
    what = "training step (fprop + dgrad + wgrad)" if op == "train" else op
    return (f"{doc.get('network') or 'layers'} {what} on {gpu}, batch {doc.get('batch')}, kernel {tile} "
            f"{kernel.get('layout', '?')} {kernel.get('dtype', '?')} vector {kernel.get('vector', '?')}"
            f"{'' if doc.get('complete', True) else '  (INCOMPLETE: interrupted)'}")


def format_document(doc: dict, *, layers=True, header=True) -> str:
    """The text report of a compare document (header, per-layer tables, totals, error summary)."""
    out = [format_header(doc), ""] if header else []
    summary = doc.get("summary") or {}
    if summary.get("passes"):
        return "\n".join(out + _step_document_lines(doc, layers)).rstrip() + "\n"
    if layers:
        for entry in doc.get("layers") or []:
            out += [layer_table(entry), ""]
    if summary:
        out += [totals_table(summary), "", error_table(summary)]
    return "\n".join(out).rstrip() + "\n"


# ---- plots ---------------------------------------------------------------------------------------
def check_matplotlib() -> None:
    """Raise ValueError (one line) if matplotlib cannot be imported."""
    import importlib.util
    if importlib.util.find_spec("matplotlib") is None:
        raise ValueError("--plot needs matplotlib, which is not installed (pip install 'deltasim[plot]')")


#: What an empty panel says when every layer's value is 0, simulated and predicted (default: generic).
_ALL_ZERO = {
    M.DRAM_WR_SECTORS: "no layer wrote to DRAM\nduring the kernel\n(dirty L2 sectors left at the end\nare not DRAM writes)",
    M.DRAM_RD_SECTORS: "no layer read from DRAM",
}


def _drawable(kind, value) -> bool:
    """Counts go on log axes (above 0 only); rates on linear axes from 0 to 1."""
    return value is not None and (value >= 0 if kind == "rate" else value > 0)


def panel_notes(entries, key: str, label: str, kind: str = "count"):
    """What the plot's panel of ``key`` says about the layers it cannot draw.

    A layer is drawn when its simulated and predicted values are both known and, for a count (log
    axes), both above 0.

    Parameters
    ----------
    entries : list of dict
        The ``layers`` of a compare document (``simulated`` and ``predicted`` dicts by metric key).
    key, label : str
        The metric and its name in the figure.
    kind : str
        ``"count"`` (log axes) or ``"rate"`` (linear axes from 0 to 1).

    Returns
    -------
    (empty, hidden) : tuple of (str or None)
        The text that replaces the panel when no layer can be drawn (None when some can), and the
        note on the layers left out (None when none is).
    """
    sim = [(e.get("simulated") or {}).get(key) for e in entries]
    pred = [(e.get("predicted") or {}).get(key) for e in entries]
    zero_sim = sum(1 for v in sim if v is not None and not _drawable(kind, v))
    zero_pred = sum(1 for v in pred if v is not None and not _drawable(kind, v))
    missing = sum(1 for s, p in zip(sim, pred) if s is None or p is None)
    drawn = sum(1 for s, p in zip(sim, pred) if _drawable(kind, s) and _drawable(kind, p))
    left_out = len(entries) - drawn
    parts = [f"{n} {what}" for n, what in ((zero_sim, "simulated 0"), (zero_pred, "predicted 0"),
                                           (missing, "without a value")) if n]
    if not entries:
        return "no layers", None
    if drawn:
        return None, (f"{left_out} of {len(entries)} layers not shown ({', '.join(parts)})" if left_out else None)
    if zero_sim == zero_pred == len(entries):
        return _ALL_ZERO.get(key, f"every layer's {label} is 0,\nsimulated and predicted"), None
    return f"no layer to draw on log axes:\n{', '.join(parts)}", None


def _scatter_panel(ax, kind, pairs, meas):
    """Predicted (dots) and measured (crosses) against simulated, with y = x: log axes for counts,
    linear from 0 to 1 for rates."""
    from matplotlib.ticker import NullFormatter
    groups = {}
    for sim, pred, op in pairs:
        groups.setdefault(op, []).append((sim, pred))
    for op, points in groups.items():
        ax.scatter(*zip(*points), s=14, label="predicted" if len(groups) == 1 else f"predicted, {op}")
    pairs = [(sim, pred) for sim, pred, _op in pairs]
    if meas:
        ax.scatter(*zip(*meas), s=14, marker="x", label="measured")
    values = [v for pair in pairs + meas for v in pair]
    if kind == "rate":
        ax.plot([0, 1], [0, 1], "k--", linewidth=0.8, label="y = x")
        ax.set_xlim(-0.03, 1.03)
        ax.set_ylim(-0.03, 1.03)
    elif values:
        lo, hi = min(values) / 1.5, max(values) * 1.5
        ax.plot([lo, hi], [lo, hi], "k--", linewidth=0.8, label="y = x")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.yaxis.set_minor_formatter(NullFormatter())
    if pairs or meas:
        ax.legend(fontsize=7, loc="upper left")


def plot_document(doc: dict, path) -> dict:
    """Predicted (and measured) vs simulated, one subplot per table metric, with y = x (counts on log
    axes, hit rates on linear ones).

    A panel with nothing to draw says why instead, and one that leaves layers out says how many
    (`panel_notes`); returns ``{label: text}`` of those notes."""
    check_matplotlib()
    import matplotlib
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    entries = doc.get("layers") or []
    fig, axes = plt.subplots(2, 4, figsize=(16, 8))
    axes = axes.ravel()
    notes = {}
    # L1 load rows of a kind no layer has on either side are left out (SIMT: cp.async; tensor-op: ld)
    loads = (M.L1_LD_REQUESTS, M.L1_LD_SECTORS) + _OPTIONAL_ROWS
    present = {key for e in entries for side in ("simulated", "predicted") for key in loads
               if (e.get(side) or {}).get(key)}
    panels = [m for m in TABLE_METRICS if m[1] not in loads or m[1] in present
              or (m[1] not in _OPTIONAL_ROWS and not present & set(_OPTIONAL_ROWS))][:len(axes)]
    for ax, (label, key, kind) in zip(axes, panels):
        pairs = [(e["simulated"].get(key), (e.get("predicted") or {}).get(key), e.get("op") or "fprop")
                 for e in entries]
        pairs = [(s, p, op) for s, p, op in pairs if _drawable(kind, s) and _drawable(kind, p)]
        meas = [(e["simulated"].get(key), (e.get("measured") or {}).get(key)) for e in entries if e.get("measured")]
        meas = [(s, m) for s, m in meas if _drawable(kind, s) and _drawable(kind, m)]
        _scatter_panel(ax, kind, pairs, meas)
        empty, hidden = panel_notes(entries, key, label, kind)
        if empty and not meas:
            notes[label] = empty
            ax.text(0.5, 0.5, empty, transform=ax.transAxes, ha="center", va="center", fontsize=10,
                    color="0.25", bbox=dict(fc="white", ec="0.6"))
            ax.set_xticks([])
            ax.set_yticks([])
        elif empty or hidden:
            notes[label] = (empty or hidden).replace("\n", " ")
            ax.text(0.98, 0.02, notes[label], transform=ax.transAxes, ha="right", va="bottom", fontsize=7,
                    color="0.3", wrap=True)
        ax.set_title(label)
        ax.set_xlabel("simulated")
        ax.set_ylabel("predicted")
        ax.grid(True, which="both", alpha=0.3)
    for ax in axes[len(panels):]:
        ax.axis("off")
    gpu = (doc.get("gpu") or {}).get("name", "?")
    op = doc.get("op") or (doc.get("kernel") or {}).get("op") or "fprop"
    what = "training step" if op == "train" else op
    fig.suptitle(f"{doc.get('network') or 'layers'} {what} on {gpu}, batch {doc.get('batch')}: predicted vs simulated "
                 f"(each point a layer{', one colour per pass' if op == 'train' else ''})")
    fig.tight_layout()
    fig.savefig(path, dpi=100, format="png")
    plt.close(fig)
    return notes
