"""Sweep results: one record per case, the journal that keeps them as they finish, the HDF5 file.

A *record* is one case of a sweep (``validation.sweep``): its parameters, its status (``done`` or
``failed`` with the error) and, when done, one row per layer: the layer's shape, every predicted
metric and, with ``--simulate``, every simulated one. Finished records are appended to the *journal*
(``OUT.journal``, JSON lines, each written and synced as its case finishes; a line cut short by a
crash is ignored) and the HDF5 file ``OUT`` is written from them, whole (a temporary file, then a
rename), now and then, at the end and on Ctrl-C. The layout of ``OUT`` is in ``validation/SCHEMA.md``.
"""
from __future__ import annotations

import datetime
import json
import os

import numpy as np

from .common import atomic_write, package_version, versions

__all__ = ["FORMAT", "VERSION", "SHAPE_FIELDS", "journal_path", "make_record", "case_summary",
           "append_journal", "write_journal", "read_journal", "write_sweep", "load_sweep", "records_of"]

FORMAT = "deltasim-sweep"
VERSION = 1
JOURNAL_FORMAT = "deltasim-sweep-journal"
#: Integer columns of a layer's shape, in /layers.
SHAPE_FIELDS = ("n", "c", "h", "w", "k", "r", "s", "stride_h", "stride_w", "pad_h", "pad_w",
                "dilation_h", "dilation_w", "groups")
#: Case parameters, stored per case and repeated on each of its layer rows.
CASE_FIELDS = ("network", "gpu", "scale", "batch")
_L2, _DRAM = "lts__t_sectors_srcunit_tex_op_read.sum", "dram__sectors_read.sum"


def journal_path(out) -> str:
    return f"{os.fspath(out)}.journal"


def _shape(layer) -> list:
    return [layer.n, layer.c, layer.h, layer.w, layer.k, layer.r, layer.s, *layer.stride, *layer.pad,
            *layer.dilation, getattr(layer, "groups", 1)]


def make_record(params: dict, *, layers=(), predicted=(), simulated=None, simulation_seconds=None,
                status="done", error=None, seconds=0.0) -> dict:
    """One case: ``params`` (key, network, gpu, scale, batch, gpu_params) and, when done, its layers
    (ConvLayer), predicted dicts and simulated dicts (None without simulation)."""
    numeric = [key for key, value in (predicted[0].items() if predicted else ())
               if isinstance(value, (int, float, np.number)) and not isinstance(value, bool)]
    text = [key for key, value in (predicted[0].items() if predicted else ()) if isinstance(value, str)]
    record = {**params, "status": status, "error": error, "seconds": float(seconds),
              "layers": [layer.name for layer in layers],
              "shapes": np.array([_shape(layer) for layer in layers], dtype=np.int64).reshape(-1, len(SHAPE_FIELDS)),
              "predicted_keys": numeric,
              "predicted": np.array([[float(p[key]) for key in numeric] for p in predicted],
                                    dtype=np.float64).reshape(len(predicted), len(numeric)),
              "predicted_text": {key: [str(p[key]) for p in predicted] for key in text},
              "simulated_keys": None, "simulated": None, "simulation_seconds": None}
    if simulated is not None:
        keys = list(simulated[0]) if simulated else []
        record["simulated_keys"] = keys
        record["simulated"] = np.array([[int(s[key]) for key in keys] for s in simulated],
                                       dtype=np.int64).reshape(len(simulated), len(keys))
        record["simulation_seconds"] = [None if t is None else float(t) for t in simulation_seconds]
    return record


def _column(record, section, key):
    keys = record[f"{section}_keys"]
    return record[section][:, keys.index(key)] if keys and key in keys else None


def case_summary(record) -> dict:
    """Network totals of a done case: predicted time, bound (the one bounding most of the time),
    predicted (and simulated) L2 / DRAM read sectors, their errors, and the mean |error| over layers."""
    out = {"layers": len(record["layers"])}
    if record["status"] != "done":
        return out
    time_s = _column(record, "predicted", "time_s")
    bounds = record["predicted_text"].get("bound")
    if time_s is not None:
        out["time_s"] = float(time_s.sum())
        if bounds:
            share = {}
            for bound, t in zip(bounds, time_s):
                share[bound] = share.get(bound, 0.0) + float(t)
            out["bound"] = max(share, key=share.get)
    for name, key in (("l2_read", _L2), ("dram_read", _DRAM)):
        pred = _column(record, "predicted", key)
        if pred is None:
            continue
        out[f"predicted_{name}"] = float(pred.sum())
        sim = _column(record, "simulated", key) if record["simulated"] is not None else None
        if sim is None:
            continue
        out[f"simulated_{name}"] = int(sim.sum())
        out[f"error_{name}"] = (float(pred.sum()) - sim.sum()) / sim.sum() if sim.sum() else None
        errors = [abs(p - s) / s for p, s in zip(pred, sim) if s]
        out[f"mean_abs_error_{name}"] = float(np.mean(errors)) if errors else None
    return out


# ---- journal -------------------------------------------------------------------------------------
def _to_json(record) -> dict:
    out = dict(record)
    for key in ("shapes", "predicted", "simulated"):
        if out[key] is not None:
            out[key] = out[key].tolist()
    return out


def _from_json(data) -> dict:
    record = dict(data)
    record["shapes"] = np.array(record["shapes"], dtype=np.int64).reshape(-1, len(SHAPE_FIELDS))
    record["predicted"] = np.array(record["predicted"], dtype=np.float64).reshape(
        len(record["layers"]), len(record["predicted_keys"]))
    if record.get("simulated") is not None:
        record["simulated"] = np.array(record["simulated"], dtype=np.int64).reshape(
            len(record["layers"]), len(record["simulated_keys"]))
    return record


def _header(config) -> str:
    return json.dumps({"format": JOURNAL_FORMAT, "version": VERSION, "config": config}) + "\n"


def write_journal(path, config: dict, records) -> None:
    """A fresh journal holding ``records`` (atomically)."""
    def writer(tmp):
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(_header(config))
            for record in records:
                fh.write(json.dumps(_to_json(record)) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
    atomic_write(path, writer)


def append_journal(path, record) -> None:
    """Append one finished case and sync it to disk before returning."""
    line = json.dumps(_to_json(record)) + "\n"    # inf (an ai_* of no traffic) as Infinity: read back
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line)
        fh.flush()
        os.fsync(fh.fileno())


def read_journal(path) -> tuple:
    """``(config, records)`` of a journal; a last line cut short (a crash while writing) is dropped."""
    with open(path, encoding="utf-8") as fh:
        lines = fh.readlines()
    try:
        head = json.loads(lines[0]) if lines else None
    except json.JSONDecodeError:
        head = None
    if not isinstance(head, dict) or head.get("format") != JOURNAL_FORMAT:
        raise ValueError(f"{path}: not a deltasim sweep journal")
    if head.get("version") != VERSION:
        raise ValueError(f"{path}: sweep journal version {head.get('version')!r}; this deltasim reads {VERSION}")
    records = []
    for number, line in enumerate(lines[1:], start=2):
        try:
            if not line.endswith("\n"):
                raise ValueError("cut short")
            records.append(_from_json(json.loads(line)))
        except (ValueError, KeyError, TypeError) as err:
            if number == len(lines):        # the line being written when the run stopped
                break
            raise ValueError(f"{path}: line {number} is corrupt: {err}") from None
    return head["config"], records


# ---- HDF5 ----------------------------------------------------------------------------------------
def _strings(values):
    import h5py
    return np.array(["" if v is None else str(v) for v in values], dtype=h5py.string_dtype())


def _union(records, section) -> list:
    keys = []
    for record in records:
        for key in record.get(f"{section}_keys") or []:
            if key not in keys:
                keys.append(key)
    return keys


def write_sweep(path, config: dict, records, *, complete: bool, error=None) -> None:
    """Write every record to ``path`` (HDF5, atomically; layout in SCHEMA.md)."""
    import h5py
    done = [(row, r) for row, r in enumerate(records) if r["status"] == "done"]
    summaries = [case_summary(r) for r in records]
    pred_keys, sim_keys = _union(records, "predicted"), _union(records, "simulated")
    text_keys = sorted({key for r in records for key in r["predicted_text"]})

    def writer(tmp):
        with h5py.File(tmp, "w") as f:
            attrs = {"format": FORMAT, "version": VERSION, "complete": bool(complete), "error": error,
                     "package_version": package_version(), "versions": versions(), "config": config,
                     "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
            for key, value in attrs.items():
                f.attrs[key] = json.dumps(value)
            cases = f.create_group("cases")
            for key in ("key", "network", "gpu", "scale", "status", "error"):
                cases.create_dataset(key, data=_strings([r[key] for r in records]))
            cases.create_dataset("batch", data=np.array([r["batch"] for r in records], dtype=np.int64))
            cases.create_dataset("seconds", data=np.array([r["seconds"] for r in records], dtype=np.float64))
            cases.create_dataset("gpu_params", data=_strings([json.dumps(r["gpu_params"]) for r in records]))
            cases.create_dataset("summary", data=_strings([json.dumps(s, allow_nan=False) for s in summaries]))
            layers = f.create_group("layers")
            counts = [len(r["layers"]) for _, r in done]
            layers.create_dataset("case", data=np.repeat([row for row, _ in done], counts).astype(np.int64))
            layers.create_dataset("position", data=np.concatenate(
                [np.arange(n) for n in counts] or [np.zeros(0)]).astype(np.int64))
            layers.create_dataset("layer", data=_strings([name for _, r in done for name in r["layers"]]))
            for key in ("network", "gpu", "scale"):
                layers.create_dataset(key, data=_strings([r[key] for _, r in done for _ in r["layers"]]))
            layers.create_dataset("batch", data=np.repeat([r["batch"] for _, r in done], counts).astype(np.int64))
            shapes = np.concatenate([r["shapes"] for _, r in done] or [np.zeros((0, len(SHAPE_FIELDS)), np.int64)])
            for j, field in enumerate(SHAPE_FIELDS):
                layers.create_dataset(field, data=shapes[:, j])
            for key in text_keys:
                layers.create_dataset(key, data=_strings([v for _, r in done for v in r["predicted_text"].get(
                    key, [None] * len(r["layers"]))]))
            _write_matrix(layers.create_group("predicted"), [r for _, r in done], "predicted", pred_keys, np.float64)
            if sim_keys:
                _write_matrix(layers.create_group("simulated"), [r for _, r in done], "simulated", sim_keys, np.int64)
                layers.create_dataset("simulation_seconds", data=np.array(
                    [np.nan if t is None else t for _, r in done for t in r["simulation_seconds"]], dtype=np.float64))
    atomic_write(path, writer)


def _write_matrix(group, records, section, keys, dtype) -> None:
    group.attrs["columns"] = json.dumps(keys)
    for key in keys:
        parts = []
        for record in records:
            column = _column(record, section, key)
            if column is None:             # not computed for this case (another version's keys)
                column = np.full(len(record["layers"]), np.nan if dtype == np.float64 else -1, dtype=dtype)
            parts.append(column.astype(dtype))
        group.create_dataset(key, data=np.concatenate(parts) if parts else np.zeros(0, dtype=dtype))


def _text(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def load_sweep(path) -> dict:
    """Read a sweep file: ``{"format", "version", "complete", "error", "config", ..., "cases": [dict],
    "layers": {column: array}, "predicted": {key: array}, "simulated": {key: array} | None}``.
    ValueError for a file that is not a sweep file of this version, or is corrupt."""
    import h5py
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: sweep results file not found")
    try:
        with h5py.File(path, "r") as f:
            if f.attrs.get("format") is None or json.loads(f.attrs["format"]) != FORMAT:
                raise ValueError(f"{path}: not a deltasim sweep results file")
            doc = {key: json.loads(value) for key, value in f.attrs.items()}
            if doc.get("version") != VERSION:
                raise ValueError(f"{path}: sweep results version {doc.get('version')!r} (written by deltasim "
                                 f"{doc.get('package_version', '?')}); this deltasim reads version {VERSION}")
            cases = {key: f["cases"][key][()] for key in f["cases"]}
            doc["cases"] = [{"key": _text(cases["key"][i]), "network": _text(cases["network"][i]),
                             "gpu": _text(cases["gpu"][i]), "scale": _text(cases["scale"][i]),
                             "batch": int(cases["batch"][i]), "status": _text(cases["status"][i]),
                             "error": _text(cases["error"][i]) or None, "seconds": float(cases["seconds"][i]),
                             "gpu_params": json.loads(_text(cases["gpu_params"][i])),
                             "summary": json.loads(_text(cases["summary"][i]))} for i in range(len(cases["key"]))]
            group = f["layers"]
            doc["layers"] = {key: (group[key].asstr()[()] if h5py.check_string_dtype(group[key].dtype)
                                   else group[key][()]) for key in group if isinstance(group[key], h5py.Dataset)}
            doc["predicted"] = {key: group["predicted"][key][()] for key in json.loads(group["predicted"].attrs["columns"])}
            doc["simulated"] = ({key: group["simulated"][key][()] for key in json.loads(group["simulated"].attrs["columns"])}
                                if "simulated" in group else None)
    except ValueError:
        raise
    except (OSError, KeyError, TypeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: corrupt or truncated sweep results file: {' '.join(str(err).split())}") from None
    return doc


def records_of(doc) -> list:
    """The records of a loaded sweep file (`load_sweep`), as `write_sweep` took them."""
    layers, records = doc["layers"], []
    case_rows = layers["case"]
    text_keys = [key for key in layers if key not in ("case", "position", "layer", "batch", "simulation_seconds",
                                                      *CASE_FIELDS, *SHAPE_FIELDS)]
    for row, case in enumerate(doc["cases"]):
        rows = np.flatnonzero(case_rows == row)
        record = {key: case[key] for key in ("key", "network", "gpu", "scale", "batch", "gpu_params", "status",
                                             "error", "seconds")}
        record["layers"] = [_text(layers["layer"][i]) for i in rows]
        record["shapes"] = np.stack([layers[field][rows] for field in SHAPE_FIELDS], axis=1).astype(np.int64)
        record["predicted_keys"] = list(doc["predicted"])
        record["predicted"] = np.stack([doc["predicted"][key][rows] for key in doc["predicted"]], axis=1) \
            if doc["predicted"] else np.zeros((len(rows), 0))
        record["predicted_text"] = {key: [_text(layers[key][i]) for i in rows] for key in text_keys}
        record["simulated_keys"] = record["simulated"] = record["simulation_seconds"] = None
        if doc["simulated"] is not None:
            record["simulated_keys"] = list(doc["simulated"])
            record["simulated"] = np.stack([doc["simulated"][key][rows] for key in doc["simulated"]], axis=1)
            record["simulation_seconds"] = [None if np.isnan(t) else float(t)
                                            for t in layers["simulation_seconds"][rows]]
        records.append(record)
    return records
