"""Shared pieces of the analytic figures (`analytic.plots`): matplotlib on Agg, atomic PNG output,
the colours of the bounds, rates with units, and value labels that avoid each other."""
from __future__ import annotations

import math

from traces.files import atomic_write

#: (key, label) of the memory levels, in the order of the roofline panels.
LEVELS = (("l1", "L1"), ("l2", "L2"), ("dram", "DRAM"))
#: Colour of each bound (the level colours of the roofline panels' titles too).
BOUND_COLORS = {"compute": "tab:purple", "l1": "tab:blue", "l2": "tab:green", "dram": "tab:red"}
BOUND_NAMES = {"compute": "compute", "l1": "L1", "l2": "L2", "dram": "DRAM"}
PARAMETER = {"batch": ("batch", "batch size"), "sms": ("SMs", "SM count")}


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend (imported on first use)."""
    import matplotlib
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    return plt


def save_figure(fig, path, dpi=100) -> None:
    """Write ``fig`` to ``path`` as PNG (whole or not at all) and close it.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
    path : str or os.PathLike
        The PNG file; written under a temporary name in its folder, then renamed.
    dpi : int
        Resolution (the figures are sized in inches).
    """
    try:
        atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=dpi, format="png"))
    finally:
        pyplot().close(fig)


def rate(value: float, unit: str) -> str:
    """3.35e12, 'B/s' -> '3.35 TB/s'."""
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def finite_positive(value) -> bool:
    return value is not None and math.isfinite(value) and value > 0


class ValueLabels:
    """Small value labels beside points, each put where it overlaps no earlier label of the panel
    (right above, right below, left above, left below, then a little further out); one that fits
    nowhere is left out when a label with the same text is already close by, and so is one that
    repeats the label of an earlier point at the same spot (layers with the same points)."""

    _OFFSETS = ((4, 2, "left", "bottom"), (4, -2, "left", "top"), (-4, 2, "right", "bottom"),
                (-4, -2, "right", "top"), (4, 9, "left", "bottom"), (4, -9, "left", "top"),
                (-4, 9, "right", "bottom"), (-4, -9, "right", "top"))

    def __init__(self, ax, fontsize=6.5):
        self.ax, self.fontsize, self.boxes, self.anchors = ax, fontsize, [], []
        self.px = ax.figure.dpi / 72.0                        # pixels per point

    def _box(self, x, y, dx, dy, ha, va, text, fontsize=None):
        size = fontsize or self.fontsize
        w, h = 0.62 * size * len(text) * self.px, 1.1 * size * self.px
        x0 = x + dx * self.px - (w if ha == "right" else 0.0)
        y0 = y + dy * self.px - (h if va == "top" else 0.0)
        return x0, y0, x0 + w, y0 + h

    def put(self, x, y, text, color, dx, dy, ha, va, fontsize=None):
        """A label at offset (dx, dy) points from the data point (x, y), whatever it overlaps."""
        px, py = self.ax.transData.transform((x, y))
        self.boxes.append((self._box(px, py, dx, dy, ha, va, text, fontsize), text))
        self.ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points", ha=ha, va=va,
                         fontsize=fontsize or self.fontsize, color=color, zorder=4, annotation_clip=False)

    def right_end(self, x, y, text, dx, fontsize=None):
        """Pixel x of the right end of a left-aligned label at (x, y) + dx points."""
        px, py = self.ax.transData.transform((x, y))
        return self._box(px, py, dx, 0, "left", "bottom", text, fontsize)[2]

    def add(self, x, y, text, color):
        """A value label beside the point, where it overlaps no earlier label (see the class)."""
        px, py = self.ax.transData.transform((x, y))
        if any(t == text and abs(ax_ - px) < 3 and abs(ay - py) < 3 for ax_, ay, t in self.anchors):
            return                                    # the same value at the same spot: said already
        self.anchors.append((px, py, text))
        for dx, dy, ha, va in self._OFFSETS:
            box = self._box(px, py, dx, dy, ha, va, text)
            if not any(box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3] for b, _ in self.boxes):
                break
        else:
            if any(t == text and abs(b[0] - px) < 30 and abs(b[1] - py) < 20 for b, t in self.boxes):
                return
            dx, dy, ha, va = self._OFFSETS[0]
            box = self._box(px, py, dx, dy, ha, va, text)
        self.put(x, y, text, color, dx, dy, ha, va)
