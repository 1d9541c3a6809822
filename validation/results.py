"""Compare results documents: building, writing (JSON, HDF5; atomically) and reading back.

The schema is documented in ``validation/SCHEMA.md``. ``python -m validation.results FILE`` prints the
report of a stored results file.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys

import numpy as np

from simcore import metrics as M

from .common import ArgumentParser, atomic_write, cli_main, package_version, rel_error, versions
from .report import SUMMARY_METRICS, format_document

__all__ = ["FORMAT", "VERSION", "RATE_KEYS", "with_rates", "make_entry", "summarize", "make_document",
           "write_json", "write_h5", "write_results", "load_results", "layer_steps", "entry_label", "main"]

FORMAT = "deltasim-compare"
VERSION = 1
RATE_KEYS = ("l1_hit_rate", "l2_hit_rate")
_SECTIONS = ("simulated", "predicted", "measured", "errors", "measured_errors/simulated",
             "measured_errors/predicted")


# ---- building ------------------------------------------------------------------------------------
def _plain(value):
    """numpy scalars -> Python numbers; NaN/inf -> None (JSON has no NaN)."""
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        value = float(value)
        return value if math.isfinite(value) else None
    if isinstance(value, np.bool_):
        return bool(value)
    return value


def with_rates(values: dict) -> dict:
    """``values`` plus ``l1_hit_rate`` and ``l2_hit_rate`` (load-sector hits / lookups) where defined; the
    L1's lookups are the ``ld`` and the ``cp.async.ca`` sectors (tensor-op kernels)."""
    out = {key: _plain(value) for key, value in values.items()}
    for name, hits, total in (("l1_hit_rate", (M.L1_LD_HITS, M.L1_LDGSTS_ACCESS_HITS),
                               (M.L1_LD_SECTORS, M.L1_LDGSTS_ACCESS_SECTORS)),
                              ("l2_hit_rate", (M.L2_RD_HITS,), (M.L2_RD_SECTORS,))):
        if name in out or out.get(hits[0]) is None:
            continue
        lookups = sum(float(out.get(key) or 0) for key in total)
        if lookups:
            out[name] = sum(float(out.get(key) or 0) for key in hits) / lookups
    return out


def _numeric(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _errors(values: dict, reference: dict) -> dict:
    """Relative error per key; for the hit rates (RATE_KEYS) the plain difference, since a relative
    error of a hit rate near 0 says nothing (0.1 % vs 0.2 % would read as +100 %)."""
    return {key: (float(values[key]) - float(reference[key]) if key in RATE_KEYS
                  else rel_error(values[key], reference[key])) for key in reference
            if key in values and _numeric(reference[key]) and _numeric(values[key])}


def make_entry(layer, simulated: dict, predicted: dict, measured=None, seconds=None, op="fprop") -> dict:
    """One layer (one pass of it, ``op``) of a compare document."""
    sim = with_rates(simulated)
    pred = with_rates(predicted)
    entry = {"name": layer.name, "op": op, "layer": layer.as_dict(), "simulated": sim, "predicted": pred,
             "measured": None if measured is None else with_rates(measured),
             "errors": _errors(pred, sim), "measured_errors": None,
             "simulation_seconds": None if seconds is None else float(seconds)}
    if measured is not None:
        meas = entry["measured"]
        entry["measured_errors"] = {"simulated": _errors(sim, meas), "predicted": _errors(pred, meas)}
    return entry


def entry_label(entry, passes=True) -> str:
    """``name`` of an entry, ``name (op)`` when ``passes`` and the entry is not an fprop."""
    op = entry.get("op") or "fprop"
    return entry["name"] if not passes or op == "fprop" else f"{entry['name']} ({op})"


def _stats(entries, getter) -> dict:
    out = {}
    for key in SUMMARY_METRICS:
        values = [(abs(err), entry_label(entry)) for entry in entries
                  for err in [(getter(entry) or {}).get(key)] if err is not None]
        if not values:
            continue
        worst = max(values, key=lambda v: v[0])
        out[key] = {"mean_abs": float(np.mean([v for v, _ in values])), "worst_abs": worst[0],
                    "worst_layer": worst[1], "count": len(values)}
    return out


def _sum(dicts) -> dict:
    total = {}
    for values in dicts:
        for key, value in values.items():
            if _numeric(value) and key not in RATE_KEYS:
                total[key] = total.get(key, 0) + value
    return total


def _predicted_sum(dicts) -> dict:
    """Predictions summed (`analytic.step_total`: intensities from the summed bytes, the bound that
    carries most of the time), hit rates from the summed counts."""
    from analytic.training import step_total
    return with_rates(step_total({i: {k: v for k, v in values.items() if k not in RATE_KEYS}
                                  for i, values in enumerate(dicts)}))


def _ops(entries) -> list:
    ops = []
    for entry in entries:
        if (entry.get("op") or "fprop") not in ops:
            ops.append(entry.get("op") or "fprop")
    return ops


def layer_steps(entries: list) -> list:
    """Per layer (entries grouped by name, in order of first appearance), its passes summed: a training
    step when the entries hold fprop, dgrad and wgrad. Each ``{"name", "layer", "passes": [op, ...],
    "simulated", "predicted", "errors"}``."""
    groups = {}
    for entry in entries:
        groups.setdefault(entry["name"], []).append(entry)
    out = []
    for name, group in groups.items():
        sim = with_rates(_sum(e["simulated"] for e in group))
        pred = _predicted_sum(e["predicted"] for e in group)
        out.append({"name": name, "layer": group[0].get("layer"), "passes": [e.get("op") or "fprop" for e in group],
                    "simulated": sim, "predicted": pred, "errors": _errors(pred, sim)})
    return out


def summarize(entries: list) -> dict:
    """Totals over the layers and the mean / worst absolute relative error per metric; with more than
    one pass, the same per pass (``passes``) and every layer's passes summed (``steps``)."""
    summary = _summary(entries)
    ops = _ops(entries)
    if len(ops) > 1:
        summary["passes"] = {}
        for op in ops:
            part = _summary([e for e in entries if (e.get("op") or "fprop") == op])
            summary["passes"][op] = {key: part[key] for key in ("layers", "totals", "total_errors", "errors",
                                                                 "predicted_time_s", "simulation_seconds")}
        summary["steps"] = layer_steps(entries)
    return summary


def _summary(entries: list) -> dict:
    sim_total = with_rates(_sum(e["simulated"] for e in entries))
    pred_total = _predicted_sum(e["predicted"] for e in entries)
    measured = [e for e in entries if e.get("measured") is not None]
    meas_total = with_rates(_sum(e["measured"] for e in measured)) if measured else None
    summary = {
        "layers": len(entries),
        "totals": {"simulated": sim_total, "predicted": pred_total, "measured": meas_total},
        "total_errors": _errors(pred_total, sim_total),
        "errors": _stats(entries, lambda e: e["errors"]),
        "predicted_time_s": _plain(pred_total.get("time_s")),
        "simulation_seconds": float(sum(e.get("simulation_seconds") or 0.0 for e in entries)),
        "measured_layers": len(measured),
        "measured_errors": None,
        "total_measured_errors": None,
    }
    if measured:
        summary["measured_errors"] = {
            "simulated": _stats(measured, lambda e: e["measured_errors"]["simulated"]),
            "predicted": _stats(measured, lambda e: e["measured_errors"]["predicted"])}
        if len(measured) == len(entries):
            summary["total_measured_errors"] = {"simulated": _errors(sim_total, meas_total),
                                                "predicted": _errors(pred_total, meas_total)}
    return summary


def make_document(*, network, gpu, kernel, factors, batch, entries, complete, error=None, op=None) -> dict:
    """The whole compare document (see SCHEMA.md); ``op``: the --op of the run (default the kernel's)."""
    import dataclasses
    gpu_dict = dataclasses.asdict(gpu) if dataclasses.is_dataclass(gpu) else dict(gpu)
    gpu_dict = {k: list(v) if isinstance(v, tuple) else v for k, v in gpu_dict.items()}
    kernel_dict = kernel.as_dict() if hasattr(kernel, "as_dict") else dict(kernel)
    op = op or kernel_dict.get("op") or "fprop"
    return {"format": FORMAT, "version": VERSION, "complete": bool(complete), "error": error,
            "network": network, "batch": batch, "op": op, "gpu": gpu_dict, "kernel": kernel_dict,
            "factors": factors, "package_version": package_version(), "versions": versions(),
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "layers": entries, "summary": summarize(entries)}


# ---- writing -------------------------------------------------------------------------------------
def write_json(doc: dict, path) -> None:
    def writer(tmp):
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=1, allow_nan=False)
            fh.write("\n")
    atomic_write(path, writer)


_META = ("format", "version", "complete", "error", "network", "batch", "op", "package_version", "created")
_JSON_META = ("gpu", "kernel", "factors", "versions")


def _write_section(group, rows: list) -> None:
    """Columns of dicts (or None) as per-key datasets, with presence masks (see SCHEMA.md)."""
    import h5py
    columns = []
    for row in rows:
        for key in row or {}:
            if key not in columns:
                columns.append(key)
    group.attrs["columns"] = json.dumps(columns)
    group.create_dataset("present", data=np.array([row is not None for row in rows], dtype=bool))
    n = len(rows)
    mask = np.zeros((n, len(columns)), dtype=bool)
    json_columns = []
    for j, key in enumerate(columns):
        values = [(row or {}).get(key) for row in rows]
        for i, row in enumerate(rows):
            mask[i, j] = row is not None and key in row
        given = [v for v in values if v is not None]
        mixed = any(isinstance(v, str) for v in given) and not all(isinstance(v, str) for v in given)
        if mixed or any(isinstance(v, bool) or not isinstance(v, (int, float, str)) for v in given):
            json_columns.append(key)           # lists, dicts, booleans: JSON text
            data = np.array([json.dumps(v) for v in values], dtype=h5py.string_dtype())
        elif given and all(isinstance(v, str) for v in given):
            data = np.array([v if v is not None else "" for v in values], dtype=h5py.string_dtype())
        elif given and all(isinstance(v, int) and not isinstance(v, bool) for v in given) and len(given) == n:
            data = np.array(values, dtype=np.int64)
        else:
            data = np.array([np.nan if v is None else float(v) for v in values], dtype=np.float64)
        group.create_dataset(key, data=data)
    group.create_dataset("_mask", data=mask)
    group.attrs["json_columns"] = json.dumps(json_columns)


def write_h5(doc: dict, path) -> None:
    """The document as HDF5: metadata in root attributes, per-layer results as datasets."""
    import h5py

    def writer(tmp):
        with h5py.File(tmp, "w") as f:
            for key in _META:
                value = doc.get(key)
                f.attrs[key] = json.dumps(value)
            for key in _JSON_META:
                f.attrs[key] = json.dumps(doc.get(key), allow_nan=False)
            for name, value in (doc.get("versions") or {}).items():
                f.attrs[f"version_{name}"] = "" if value is None else str(value)
            # the summary can outgrow HDF5's 64 KiB attribute limit: a scalar string dataset
            f.create_dataset("summary", data=json.dumps(doc.get("summary"), allow_nan=False),
                             dtype=h5py.string_dtype())
            gpu = doc.get("gpu") or {}
            f.attrs["gpu_name"] = str(gpu.get("name", ""))
            entries = doc.get("layers") or []
            layers = f.create_group("layers")
            layers.create_dataset("name", data=np.array([e["name"] for e in entries], dtype=h5py.string_dtype()))
            layers.create_dataset("op", data=np.array([e.get("op") or "fprop" for e in entries],
                                                      dtype=h5py.string_dtype()))
            layers.create_dataset("layer", data=np.array([json.dumps(e["layer"]) for e in entries],
                                                         dtype=h5py.string_dtype()))
            seconds = [e.get("simulation_seconds") for e in entries]
            layers.create_dataset("simulation_seconds",
                                  data=np.array([np.nan if s is None else s for s in seconds], dtype=np.float64))
            for section in _SECTIONS:
                if "/" in section:
                    top, sub = section.split("/")
                    rows = [(e.get(top) or {}).get(sub) if e.get(top) is not None else None for e in entries]
                else:
                    rows = [e.get(section) for e in entries]
                _write_section(f.create_group(section), rows)
            f.attrs["measured_errors_present"] = json.dumps([e.get("measured_errors") is not None for e in entries])
    atomic_write(path, writer)


def write_results(doc: dict, *, json_path=None, h5_path=None) -> None:
    if json_path:
        write_json(doc, json_path)
    if h5_path:
        write_h5(doc, h5_path)


# ---- reading -------------------------------------------------------------------------------------
def _check_format(doc, path) -> dict:
    if not isinstance(doc, dict) or "format" not in doc:
        raise ValueError(f"{path}: not a deltasim compare results file (no 'format' field)")
    if doc["format"] != FORMAT:
        raise ValueError(f"{path}: format {doc['format']!r} is not {FORMAT!r}")
    if doc.get("version") != VERSION:
        raise ValueError(f"{path}: results file version {doc.get('version')!r} (written by deltasim "
                         f"{doc.get('package_version', '?')}); this deltasim {package_version()} reads version {VERSION}")
    return doc


def _read_section(group) -> list:
    columns = json.loads(group.attrs["columns"])
    present = group["present"][()]
    mask = group["_mask"][()]
    data = {key: group[key][()] for key in columns}
    json_columns = set(json.loads(group.attrs.get("json_columns", "[]")))
    rows = []
    for i, is_present in enumerate(present):
        if not is_present:
            rows.append(None)
            continue
        row = {}
        for j, key in enumerate(columns):
            if not mask[i, j]:
                continue
            value = data[key][i]
            if isinstance(value, bytes):
                value = value.decode("utf-8")
                if key in json_columns:
                    value = json.loads(value)
            elif isinstance(value, np.integer):
                value = int(value)
            elif isinstance(value, np.floating):
                value = None if np.isnan(value) else float(value)
            row[key] = value
        rows.append(row)
    return rows


def _load_h5(path) -> dict:
    import h5py
    try:
        with h5py.File(path, "r") as f:
            if "format" not in f.attrs:
                raise ValueError(f"{path}: not a deltasim compare results file (no 'format' attribute)")
            doc = {key: json.loads(f.attrs[key]) for key in _META if key in f.attrs}
            _check_format(doc, path)
            for key in _JSON_META:
                doc[key] = json.loads(f.attrs[key])
            summary = f["summary"][()]
            doc["summary"] = json.loads(summary.decode("utf-8") if isinstance(summary, bytes) else summary)
            names = [n.decode("utf-8") if isinstance(n, bytes) else str(n) for n in f["layers/name"][()]]
            ops = ([o.decode("utf-8") if isinstance(o, bytes) else str(o) for o in f["layers/op"][()]]
                   if "op" in f["layers"] else ["fprop"] * len(names))
            layer_dicts = [json.loads(t.decode("utf-8") if isinstance(t, bytes) else t) for t in f["layers/layer"][()]]
            seconds = [None if np.isnan(s) else float(s) for s in f["layers/simulation_seconds"][()]]
            sections = {section: _read_section(f[section]) for section in _SECTIONS}
            me_present = json.loads(f.attrs["measured_errors_present"])
    except ValueError:
        raise
    except (OSError, KeyError, TypeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: corrupt or truncated HDF5 results file: {' '.join(str(err).split())}") from None
    entries = []
    for i, name in enumerate(names):
        entries.append({"name": name, "op": ops[i], "layer": layer_dicts[i], "simulated": sections["simulated"][i],
                        "predicted": sections["predicted"][i], "measured": sections["measured"][i],
                        "errors": sections["errors"][i],
                        "measured_errors": {"simulated": sections["measured_errors/simulated"][i],
                                            "predicted": sections["measured_errors/predicted"][i]}
                        if me_present[i] else None,
                        "simulation_seconds": seconds[i]})
    ordered = {"format": doc["format"], "version": doc["version"]}
    for key in ("complete", "error", "network", "batch", "op", "gpu", "kernel", "factors", "package_version",
                "versions", "created"):
        ordered[key] = doc.get(key)
    ordered["layers"] = entries
    ordered["summary"] = doc.get("summary")
    return ordered


def load_results(path) -> dict:
    """Read a compare results file (JSON or HDF5, by content); ValueError if corrupt or another version."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: results file not found")
    with open(path, "rb") as fh:
        magic = fh.read(8)
    if magic == b"\x89HDF\r\n\x1a\n" or path.lower().endswith((".h5", ".hdf5")):
        return _load_h5(path)
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: not a valid JSON results file: {err}") from None
    _check_format(doc, path)
    if not isinstance(doc.get("layers"), list):
        raise ValueError(f"{path}: results file has no 'layers' list")
    return doc


# ---- CLI: print a stored results file ------------------------------------------------------------
def create_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="python -m validation.results",
                            description="Print the report of a stored compare results file (JSON or HDF5).")
    parser.add_argument("file", help="results file written by validation.compare --json/--h5")
    parser.add_argument("--quiet", action="store_true", help="totals and error summary only")
    return parser


def check_arguments(args) -> None:
    args.document = load_results(args.file)


def run(args) -> int:
    doc = getattr(args, "document", None) or load_results(args.file)
    sys.stdout.write(format_document(doc, layers=not args.quiet))
    return 0


def main(argv=None) -> int:
    return cli_main(create_parser, check_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
