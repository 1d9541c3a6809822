"""Figures of the analytic CLIs: roofline trajectories and predicted speedups.

``roofline_figure(data, top=8)``
    Hierarchical roofline trajectories (Ibrahim, Williams and Oliker's roofline scaling trajectories,
    applied to deep learning by Javed, Ibrahim and Lu, 2019) of the document that
    ``python -m analytic.roofline --json`` writes: one log-log panel per memory level (L1, L2, DRAM),
    x the arithmetic intensity at that level (FLOP per byte moved there), y the predicted performance
    (FLOP / predicted time, the same in every panel), against the roof of that level's bandwidth and
    of compute. Each layer is one line through its points in order of the varied parameter (batch or
    SM count), the value written at each point and an arrowhead on the way to the largest value. The
    ``top`` layers with the largest predicted time (summed over the values) are coloured and named in
    the legend with their bound at the smallest and the largest value; the others are thin and grey.
``scaling_figure(data)``
    The document of ``python -m analytic.scaling --json``: left, each layer's predicted time on the
    base GPU coloured by its bound; then one panel per scenario with each layer's predicted speedup
    (a stem from 1 to the speedup, its dot coloured by the bound on the scaled GPU) and the
    network's (sum of the layer times) in the last row. A layer that carries ``speedup_simulated``
    (a number) gets a black diamond there, and so does the network row of a scenario that does.
``save_figure(fig, path)``
    Writes the figure as PNG, atomically (a temporary name, then rename), and closes it.

Matplotlib (the ``plot`` extra) is imported when a figure is made, with the Agg backend.
"""
from __future__ import annotations

import math

from ._figures import (BOUND_COLORS, BOUND_NAMES, LEVELS, PARAMETER, ValueLabels, finite_positive, pyplot, rate,
                       save_figure)

__all__ = ["LEVELS", "BOUND_COLORS", "pyplot", "save_figure", "top_layers", "level_note",
           "roofline_figure", "scaling_figure"]


# ---- roofline trajectories -----------------------------------------------------------------------
def top_layers(rows, count: int) -> list:
    """The layers to colour: the ``count`` largest by predicted time summed over their rows.

    Parameters
    ----------
    rows : list of dict
        Points with ``index`` (the layer's position) and ``time_s``.
    count : int

    Returns
    -------
    list of int
        Layer indices, largest total first (ties: the earlier layer first).
    """
    total = {}
    for row in rows:
        total[row["index"]] = total.get(row["index"], 0.0) + row["time_s"]
    return sorted(total, key=lambda i: (-total[i], i))[:count]


def level_note(rows, level: str, label: str):
    """What a roofline panel says about the points it cannot draw.

    Parameters
    ----------
    rows : list of dict
        Points with ``ai_<level>`` (None or inf: no bytes moved at that level) and ``gflops_per_s``.
    level, label : str
        ``"l1"``, ``"l2"`` or ``"dram"``, and its name in the figure.

    Returns
    -------
    (empty, hidden) : tuple of (str or None)
        The text that replaces an empty panel (None when some point can be drawn) and the note on
        the points left out (None when none is).
    """
    ai = [row[f"ai_{level}"] for row in rows]
    drawn = [a for a, row in zip(ai, rows) if finite_positive(a) and row["gflops_per_s"] > 0]
    no_traffic = sum(1 for a in ai if a is None or (isinstance(a, float) and math.isinf(a)))
    if not drawn:
        if rows and no_traffic == len(rows):
            return f"no layer moved any data at {label}\n(every arithmetic intensity is infinite)", None
        return f"no point to draw at {label}", None
    hidden = f"{no_traffic} point(s) with no {label} traffic not shown" if no_traffic else None
    return None, hidden


def _ceiling_sets(data) -> list:
    """The distinct ceilings of the document (one per GPU), smallest compute peak first."""
    seen, out = set(), []
    for ceiling in data["ceilings"]:
        key = tuple(ceiling[k] for k in ("compute", "l1", "l2", "dram"))
        if key not in seen:
            seen.add(key)
            out.append(ceiling)
    return sorted(out, key=lambda c: (c["compute"], c["l1"]))


def _draw_roofs(ax, ceilings, level, label, x_lo, x_hi, labels):
    """The roof of each GPU: its ``level`` bandwidth up to the ridge point, then its compute peak; the
    compute label right of the ridge (or at the right edge if it would not fit), the bandwidth label
    along the slope."""
    several = len(ceilings) > 1
    bandwidths = {c[level] for c in ceilings}
    right = ax.transAxes.transform((1.0, 0.0))[0]
    for i, ceiling in enumerate(ceilings):
        peak, bandwidth = ceiling["compute"] / 1e9, ceiling[level]
        ridge = peak * 1e9 / bandwidth
        shade = str(0.55 * (1 - (i + 1) / len(ceilings))) if several else "0.15"
        ax.plot([x_lo, ridge, x_hi], [bandwidth * x_lo / 1e9, peak, peak], color=shade, lw=1.3, zorder=1)
        which = f" ({ceiling['sms']} SMs)" if several else ""
        text = f"compute {rate(ceiling['compute'], 'FLOP/s')}{which}"
        if labels.right_end(ridge, peak, text, 4, 7) < right - 4:
            labels.put(ridge, peak, text, shade, 4, 2, "left", "bottom", 7)
        else:
            labels.put(x_hi, peak, text, shade, -4, 2, "right", "bottom", 7)
        if i and bandwidth == ceilings[i - 1][level]:
            continue                                   # same bandwidth roof as the one before
        x_text = x_lo * 1.3
        ax.text(x_text, bandwidth * x_text / 1e9 * 1.12,
                f"{label} {rate(bandwidth, 'B/s')}{which if len(bandwidths) > 1 else ''}",
                fontsize=7, color=shade, ha="left", va="bottom", rotation=math.degrees(math.atan(bandwidth / 1e9)),
                rotation_mode="anchor", transform_rotates_text=True)


def _trajectory(ax, points, level, color, rank, labels):
    """One layer's line; ``rank``: its place among the coloured layers (0: the largest, drawn on top
    of the others), None for a grey one."""
    top = rank is not None
    xs = [p[f"ai_{level}"] for p in points]
    ys = [p["gflops_per_s"] for p in points]
    style = dict(color=color, lw=1.6, ms=4, zorder=3.9 - rank / 1000) if top else \
        dict(color="0.7", lw=0.7, ms=2, zorder=2)
    ax.plot(xs, ys, "-o", **style)
    for i in range(len(xs) - 1, 0, -1):              # arrowhead on the last segment that has a length
        if (xs[i], ys[i]) != (xs[i - 1], ys[i - 1]):
            ax.annotate("", xy=(xs[i], ys[i]), xytext=(xs[i - 1], ys[i - 1]), zorder=style["zorder"],
                        arrowprops=dict(arrowstyle="-|>", color=style["color"], lw=style["lw"],
                                        mutation_scale=14 if top else 8, shrinkA=0, shrinkB=2))
            break
    if not top:
        return
    where = {}                                        # values at the same spot share one label
    for i, (x, y) in enumerate(zip(xs, ys)):
        where.setdefault((round(math.log10(x), 2), round(math.log10(y), 2)), (x, y, []))[2].append(i)
    for x, y, at in where.values():
        values = [str(points[i]["value"]) for i in at]
        run = len(at) > 2 and at == list(range(at[0], at[-1] + 1))
        labels.add(x, y, f"{values[0]}\u2013{values[-1]}" if run else ",".join(values), color)


def _layer_colors(count):
    """Distinct colours without the greys (grey is for the layers outside the top)."""
    plt = pyplot()
    if count <= 9:
        palette = [c for i, c in enumerate(plt.get_cmap("tab10").colors) if i != 7]
    else:
        palette = [c for i, c in enumerate(plt.get_cmap("tab20").colors) if i not in (14, 15)]
    return [palette[i % len(palette)] for i in range(count)]


def _legend_label(points, same_as):
    first, last = points[0], points[-1]
    bound = BOUND_NAMES[first["bound"]]
    if first["bound"] != last["bound"]:
        bound += f" -> {BOUND_NAMES[last['bound']]}"
    label = f"{first['layer']}  ({bound}-bound)"
    return label + (f"\n    same points as {same_as}" if same_as else "")


def roofline_figure(data: dict, top: int = 8):
    """The roofline trajectories of an ``analytic.roofline`` document (see the module docstring).

    Parameters
    ----------
    data : dict
        ``roofline_data``'s result or its ``--json`` file: ``network``, ``gpu``, ``vary``
        (``"batch"`` or ``"sms"``), ``values``, ``batch``, ``ceilings`` (one per value: ``sms``,
        ``compute`` in FLOP/s, ``l1``, ``l2``, ``dram`` in B/s) and ``rows`` (one per layer and value:
        ``index``, ``layer``, ``value``, ``ai_l1``, ``ai_l2``, ``ai_dram``, ``gflops_per_s``,
        ``time_s``, ``bound``).
    top : int
        How many layers to colour and name (largest summed predicted time first).

    Returns
    -------
    matplotlib.figure.Figure
        Three panels (L1, L2, DRAM) and a legend; `save_figure` writes it.
    """
    from matplotlib.lines import Line2D
    from matplotlib.ticker import NullFormatter
    plt = pyplot()
    rows, vary = data["rows"], data["vary"]
    short, long = PARAMETER[vary]
    layers = {}
    for row in rows:
        layers.setdefault(row["index"], []).append(row)
    for points in layers.values():
        points.sort(key=lambda r: r["value"])
    chosen = top_layers(rows, top)
    colors = dict(zip(chosen, _layer_colors(len(chosen))))
    top_rank = {index: rank for rank, index in enumerate(chosen)}
    ceilings = _ceiling_sets(data)
    perf = [r["gflops_per_s"] for r in rows if r["gflops_per_s"] > 0]
    peak = max(c["compute"] for c in ceilings) / 1e9
    y_lo = (min(perf) if perf else peak) / 4
    fig, axes = plt.subplots(1, 3, figsize=(17, 6.4), sharey=True)
    fig.subplots_adjust(left=0.05, right=0.82, bottom=0.09, top=0.85, wspace=0.1)   # fixed: labels placed in pixels
    for ax, (level, label) in zip(axes, LEVELS):
        empty, hidden = level_note(rows, level, label)
        ai = [r[f"ai_{level}"] for r in rows if finite_positive(r[f"ai_{level}"])]
        ai += [c["compute"] / c[level] for c in ceilings]
        x_lo, x_hi = min(ai) / 4, max(ai) * 4
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(x_lo, x_hi)
        ax.set_ylim(y_lo, peak * 2.2)
        labels = ValueLabels(ax)
        _draw_roofs(ax, ceilings, level, label, x_lo, x_hi, labels)
        for index in sorted(layers, key=lambda i: (i in colors, top_rank.get(i, 0))):    # grey ones first
            points = [p for p in layers[index]
                      if finite_positive(p[f"ai_{level}"]) and p["gflops_per_s"] > 0]
            if points:
                _trajectory(ax, points, level, colors.get(index), top_rank.get(index), labels)
        if empty:
            ax.text(0.5, 0.5, empty, transform=ax.transAxes, ha="center", va="center", fontsize=10,
                    color="0.3", bbox=dict(fc="white", ec="0.6"))
        if hidden:
            ax.text(0.98, 0.02, hidden, transform=ax.transAxes, ha="right", va="bottom", fontsize=7, color="0.3")
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_title(f"{label}: FLOP per byte moved at {label}", color=BOUND_COLORS[level], fontsize=11)
        ax.set_xlabel(f"arithmetic intensity at {label} (FLOP/byte)")
        ax.grid(True, which="major", alpha=0.3)
    axes[0].set_ylabel("predicted performance (GFLOP/s)")
    handles, seen = [], {}
    for index in chosen:
        points = layers[index]
        shape = tuple((p["value"], p["gflops_per_s"], p["ai_l1"], p["ai_l2"], p["ai_dram"]) for p in points)
        same_as = seen.setdefault(shape, points[0]["layer"])
        handles.append(Line2D([], [], color=colors[index], marker="o", ms=4, lw=1.6,
                              label=_legend_label(points, same_as if same_as != points[0]["layer"] else None)))
    others = len(layers) - len(chosen)
    if others:
        handles.append(Line2D([], [], color="0.7", marker="o", ms=2, lw=0.7, label=f"the other {others} layers"))
    handles.append(Line2D([], [], color="0.15", lw=1.3, label="roofs: level bandwidth, compute peak"))
    fig.legend(handles=handles, loc="center right", fontsize=8, frameon=False,
               title=f"top {len(chosen)} of {len(layers)} layers\nby predicted time\n(bound at {short} "
                     f"{data['values'][0]} -> {data['values'][-1]})", title_fontsize=8)
    fixed = (f"batch {data['batch'][0]}" if vary == "sms" else f"{data['ceilings'][0]['sms']} SMs")
    values = " -> ".join(str(v) for v in data["values"])
    what = {"train": " training step (fprop + dgrad + wgrad)", "dgrad": " dgrad", "wgrad": " wgrad"}.get(
        data.get("op", "fprop"), "")
    fig.suptitle(f"{data['network']}{what} on {data['gpu']} ({fixed}): roofline trajectories as the {long} grows "
                 f"({values})\nnumbers at the points: {long}; arrowheads point towards the largest",
                 fontsize=11)
    return fig


# ---- scaling -------------------------------------------------------------------------------------
def _bound_handles(simulated: bool):
    from matplotlib.lines import Line2D
    handles = [Line2D([], [], color=c, marker="o", ls="", label=f"{BOUND_NAMES[b]}-bound")
               for b, c in BOUND_COLORS.items()]
    if simulated:
        handles.append(Line2D([], [], color="k", marker="D", mfc="none", ls="", label="simulated speedup"))
    return handles


def _number(value):
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) else None


def scaling_figure(data: dict):
    """The predicted speedups of an ``analytic.scaling`` document (see the module docstring).

    Parameters
    ----------
    data : dict
        ``scaling_data``'s result or its ``--json`` file: ``network``, ``gpu``, ``batch``, ``base``
        (per layer: ``layer``, ``time_s``, ``bound``), ``base_total_time_s`` and ``scenarios`` (each:
        ``scale``, ``speedup``, optional ``speedup_simulated``, and ``layers``, per layer:
        ``speedup``, ``bound`` on the scaled GPU, optional ``speedup_simulated``, a number or None).

    Returns
    -------
    matplotlib.figure.Figure
        The base panel and one panel per scenario; `save_figure` writes it.
    """
    plt = pyplot()
    base, scenarios = data["base"], data["scenarios"]
    names = [row["layer"] for row in base] + ["network"]
    ys = list(range(len(base))) + [len(base) + 0.8]
    height = max(3.5, 0.2 * len(names) + 1.9)
    fig, axes = plt.subplots(1, 1 + len(scenarios), sharey=True, squeeze=False,
                             figsize=(3.2 + 2.8 * (1 + len(scenarios)), height),
                             gridspec_kw={"width_ratios": [1.2] + [1.0] * len(scenarios)})
    axes = axes[0]
    times = [row["time_s"] * 1e6 for row in base]
    axes[0].barh(ys[:-1], times, color=[BOUND_COLORS[row["bound"]] for row in base], height=0.7)
    axes[0].text(0.02, ys[-1], f"total {data['base_total_time_s'] * 1e6:,.1f} us", va="center", fontsize=8,
                 transform=axes[0].get_yaxis_transform())
    axes[0].set_xlabel("predicted time on the base GPU (us)")
    axes[0].set_title(f"{data['gpu']} as it is: time, coloured by bound", fontsize=9)
    simulated_any = False
    for ax, scenario in zip(axes[1:], scenarios):
        rows = scenario["layers"]
        speedups = [row["speedup"] for row in rows] + [scenario["speedup"]]
        colors = [BOUND_COLORS[row["bound"]] for row in rows] + ["k"]
        ax.hlines(ys, 1.0, speedups, colors=colors, lw=1.2)
        ax.scatter(speedups[:-1], ys[:-1], c=colors[:-1], s=18, zorder=3, gid="predicted")
        ax.scatter(speedups[-1:], ys[-1:], c="k", s=40, marker="s", zorder=3)
        sims = [(_number(row.get("speedup_simulated")), y) for row, y in zip(rows, ys)]
        sims.append((_number(scenario.get("speedup_simulated")), ys[-1]))
        sims = [(s, y) for s, y in sims if s is not None]
        if sims:
            simulated_any = True
            ax.scatter([s for s, _ in sims], [y for _, y in sims], marker="D", facecolors="none",
                       edgecolors="k", s=30, zorder=4, gid="simulated")
        everything = speedups + [s for s, _ in sims] + [1.0]
        lo, hi = min(everything), max(everything)
        pad = max(0.05, 0.08 * (hi - lo))
        ax.set_xlim(lo - pad * (2.5 if scenario["speedup"] < 1.0 else 1.0), hi + pad * 2.5)
        ax.axvline(1.0, color="0.4", lw=0.8)
        slower = speedups[-1] < 1.0                   # the label away from the stem
        ax.text(speedups[-1], ys[-1], f"  {speedups[-1]:.3f}x  ", va="center", fontsize=8,
                ha="right" if slower else "left")
        ax.set_title(scenario["scale"], fontsize=9)
        ax.set_xlabel("predicted speedup (x)")
        ax.grid(True, axis="x", alpha=0.3)
    first = axes[0]
    first.set_yticks(ys)
    first.set_yticklabels(names, fontsize=7)
    first.get_yticklabels()[-1].set_fontweight("bold")
    first.set_ylim(ys[-1] + 0.8, -0.8)
    fig.legend(handles=_bound_handles(simulated_any), loc="lower center", ncol=5, fontsize=8, frameon=False,
               title="bound (bars: on the GPU as it is; dots: on the scaled GPU)", title_fontsize=8)
    fig.suptitle(f"{data['network']} batch {data['batch']} on {data['gpu']}: predicted speedup of each layer "
                 f"and of the network per scaled resource", fontsize=10)
    fig.tight_layout(rect=(0, 0.6 / height, 1, 1))
    return fig
