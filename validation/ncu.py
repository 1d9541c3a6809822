"""Read Nsight Compute ``ncu --csv`` exports and match their kernel launches to layers.

Two layouts are accepted:

* **raw page** (``ncu --csv --page raw``): one row per kernel launch, one column per metric
  (``"ID","Process ID",...,"Kernel Name",...,"dram__sectors_read.sum",...``), optionally followed by a
  units row (first cells empty, metric cells such as ``sector``).
* **long / details** (``ncu --csv --metrics ...``): one row per (launch, metric):
  ``"ID",...,"Kernel Name",...,"Metric Name","Metric Unit","Metric Value"``.

Values may carry thousands separators (``"1,234,567"``). Units with an SI or binary prefix
(``Ksector``, ``Mbyte``, ``KiB``) are scaled to base units. Lines before the header (``==PROF==`` ...)
are skipped. A column (or long-layout column) named ``layer`` maps launches to layers by name;
otherwise launches are matched to the compared layers in order, one launch per layer.
"""
from __future__ import annotations

import csv
import io
import os
import re

from simcore import metrics as M

__all__ = ["REQUIRED_METRICS", "read_ncu_csv", "match_measurements", "load_measurements"]

#: Metrics an ncu export must provide to be compared (the table's sector counts).
REQUIRED_METRICS = (M.L1_LD_SECTORS, M.L2_RD_SECTORS, M.DRAM_RD_SECTORS, M.DRAM_WR_SECTORS)
_KNOWN = frozenset(M.all_keys())
_ID_NAMES = ("id",)
_KERNEL_NAMES = ("kernel name", "kernel", "name")
_LAYER_NAMES = ("layer", "layer name")
_PREFIX = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 1024.0, "Mi": 1024.0 ** 2, "Gi": 1024.0 ** 3,
           "Ti": 1024.0 ** 4}
_UNIT_RE = re.compile(r"^(Ki|Mi|Gi|Ti|K|M|G|T)([a-z].*|B)$")


def _parse_number(text):
    """``"1,234,567"`` -> 1234567.0; empty, ``n/a`` or non-numeric -> None."""
    if text is None:
        return None
    cleaned = str(text).strip().replace(",", "").replace("\u202f", "").replace("\u00a0", "").replace("_", "")
    cleaned = cleaned.replace(" ", "").replace("'", "")
    if not cleaned:
        return None
    try:
        return float(cleaned)
    except ValueError:
        return None


def _unit_scale(unit) -> float:
    match = _UNIT_RE.match(str(unit or "").strip())
    return _PREFIX[match.group(1)] if match else 1.0


def _is_metric_name(name: str) -> bool:
    return name in _KNOWN or "__" in name


def _find(header, names):
    lowered = [h.strip().lower() for h in header]
    for name in names:
        if name in lowered:
            return lowered.index(name)
    return None


def read_ncu_csv(path) -> list:
    """Parse an ncu CSV export into launches: ``[{"id", "kernel", "layer", "metrics": {name: value}}]``.

    Raises ValueError (one line, naming the file) if the file is not an ncu CSV export.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"ncu CSV {path}: file not found")
    try:
        with open(path, encoding="utf-8-sig", newline="") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"ncu CSV {path}: cannot read: {err}") from None
    try:
        rows = [row for row in csv.reader(io.StringIO(text)) if any(cell.strip() for cell in row)]
    except csv.Error as err:
        raise ValueError(f"ncu CSV {path}: malformed CSV: {err}") from None
    start = None
    for index, row in enumerate(rows):
        cells = [cell.strip() for cell in row]
        lowered = [cell.lower() for cell in cells]
        if "metric name" in lowered or "id" in lowered or any(c in _KNOWN for c in cells) \
                or any(c in _LAYER_NAMES for c in lowered):
            start = index
            break
    if start is None:
        raise ValueError(f"ncu CSV {path}: no header row (expected an 'ID' or 'Metric Name' column or "
                         f"metric columns such as {M.DRAM_RD_SECTORS})")
    header = [cell.strip() for cell in rows[start]]
    body = rows[start + 1:]
    lowered = [h.lower() for h in header]
    if "metric name" in lowered and "metric value" in lowered:
        launches = _read_long(path, header, body)
    else:
        launches = _read_raw(path, header, body)
    if not launches:
        raise ValueError(f"ncu CSV {path}: no kernel launches (no data rows)")
    return launches


def _cell(row, index):
    return row[index].strip() if index is not None and index < len(row) else ""


def _read_long(path, header, body) -> list:
    i_id, i_kernel, i_layer = _find(header, _ID_NAMES), _find(header, _KERNEL_NAMES), _find(header, _LAYER_NAMES)
    i_name, i_value = _find(header, ("metric name",)), _find(header, ("metric value",))
    i_unit = _find(header, ("metric unit",))
    launches, by_key = [], {}
    for line, row in enumerate(body, 1):
        ident, layer = _cell(row, i_id), _cell(row, i_layer)
        key = ident or layer or str(line)
        if key not in by_key:
            by_key[key] = {"id": ident or None, "kernel": _cell(row, i_kernel) or None,
                           "layer": layer or None, "metrics": {}}
            launches.append(by_key[key])
        name = _cell(row, i_name)
        value = _parse_number(_cell(row, i_value))
        if name and value is not None:
            by_key[key]["metrics"][name] = value * _unit_scale(_cell(row, i_unit))
    return launches


def _read_raw(path, header, body) -> list:
    i_id, i_kernel, i_layer = _find(header, _ID_NAMES), _find(header, _KERNEL_NAMES), _find(header, _LAYER_NAMES)
    metric_cols = [(i, name) for i, name in enumerate(header) if _is_metric_name(name)]
    scales = {i: 1.0 for i, _ in metric_cols}
    if body:
        first = body[0]
        ident = _cell(first, i_id) if i_id is not None else ""
        values = [_cell(first, i) for i, _ in metric_cols]
        numeric = [v for v in values if _parse_number(v) is not None]
        if (i_id is not None and not ident) or (values and not numeric and any(values)):
            scales = {i: _unit_scale(_cell(first, i)) for i, _ in metric_cols}   # the units row
            body = body[1:]
    launches = []
    for line, row in enumerate(body, 1):
        found = {}
        for i, name in metric_cols:
            value = _parse_number(_cell(row, i))
            if value is not None:
                found[name] = value * scales[i]
        launches.append({"id": _cell(row, i_id) or None, "kernel": _cell(row, i_kernel) or None,
                         "layer": _cell(row, i_layer) or None, "metrics": found})
    return launches


def _with_rates(measured: dict) -> dict:
    out = dict(measured)
    for name, hits, total in (("l1_hit_rate", M.L1_LD_HITS, M.L1_LD_SECTORS),
                              ("l2_hit_rate", M.L2_RD_HITS, M.L2_RD_SECTORS)):
        if hits in out and out.get(total):
            out[name] = out[hits] / out[total]
    return out


def match_measurements(launches, layers, *, source="ncu CSV") -> list:
    """One measured-metrics dict (or None) per layer, in the order of ``layers``.

    By name when launches carry a ``layer`` (launches with the same layer are summed), else in order
    (then the number of launches must equal the number of layers). Only metric keys of
    `simcore.metrics` are kept (plus the derived ``l1_hit_rate``/``l2_hit_rate``). Raises ValueError
    naming any required metric that the matched launches lack.
    """
    names = [layer.name for layer in layers]
    missing = [key for key in REQUIRED_METRICS if any(key not in launch["metrics"] for launch in launches)]
    if missing:
        raise ValueError(f"{source}: missing metric(s) {', '.join(missing)} (needed: {', '.join(REQUIRED_METRICS)})")
    if any(launch.get("layer") for launch in launches):
        sums = {}
        for launch in launches:
            if not launch.get("layer"):
                continue
            target = sums.setdefault(launch["layer"], {})
            for key, value in launch["metrics"].items():
                target[key] = target.get(key, 0.0) + value
        if not set(sums) & set(names):
            raise ValueError(f"{source}: none of its 'layer' values ({', '.join(sorted(sums)[:5])}"
                             f"{', ...' if len(sums) > 5 else ''}) names a compared layer "
                             f"({', '.join(names[:5])}{', ...' if len(names) > 5 else ''})")
        chosen = [sums.get(name) for name in names]
    else:
        if len(launches) != len(layers):
            raise ValueError(f"{source}: {len(launches)} kernel launches but {len(layers)} layers to compare; "
                             f"export one launch per layer or add a 'layer' column")
        chosen = [dict(launch["metrics"]) for launch in launches]
    return [None if c is None else _with_rates({k: v for k, v in c.items() if k in _KNOWN}) for c in chosen]


def load_measurements(path, layers) -> list:
    """`read_ncu_csv` + `match_measurements`, errors naming the file."""
    return match_measurements(read_ncu_csv(path), layers, source=f"ncu CSV {os.fspath(path)}")
