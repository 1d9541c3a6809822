"""HDF5 trace files: the exact warp-request stream of one layer, stored for later replay.

Layout of a file (format ``"deltasim-trace"``, version `FORMAT_VERSION`)::

    /round, /sm, /cta, /operand, /kind, /kstep, /first, /count        one entry per warp-level request,
                                                                      in global issue order
    /sectors                                                          int64 byte addresses, flat
    attrs: format, format_version, package_version, layer, kernel, gpu (JSON), requests, sectors,
           compression

The ``kernel`` attribute holds every `KernelConfig` field, the op included (``operand`` 0 / 1 / 2 are
that op's GEMM operands A / B / C); a file written before the op existed has none and reads as fprop.

``first`` is the *global* index of a request's first sector in ``/sectors``; requests are stored
back to back (``first[i + 1] == first[i] + count[i]``), whatever the layout of the chunks written.
Every dataset is chunked, compressed, checksummed (Fletcher-32) and resizable: `write_trace` appends chunk by chunk, so memory
stays bounded by one generator chunk, and writes to a temporary name in the destination directory that
is renamed into place only when the file is complete (no half-written file on error or interrupt).
`read_trace` checks the format and version and returns a `TraceFile`, whose `TraceFile.iter_chunks`
yields `RequestChunk` objects with chunk-relative ``first``, ready for `simcore.Hierarchy.feed`.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Iterable, Iterator

import h5py
import numpy as np

from simcore.gpus import GPU

from .files import atomic_write
from .kernel import KernelConfig
from .layer import ConvLayer
from .stream import RequestChunk, check_instances

__all__ = ["FORMAT_NAME", "FORMAT_VERSION", "TraceFile", "read_trace", "replay", "write_trace"]

FORMAT_NAME = "deltasim-trace"
FORMAT_VERSION = 2         # 2: /kind (request kinds, simcore.metrics.KIND_*) replaces /is_store

#: per-request datasets and their dtypes (the fields of `RequestChunk` before ``sectors``)
REQUEST_FIELDS = (("round", np.int64), ("sm", np.int32), ("cta", np.int64), ("operand", np.uint8),
                  ("kind", np.uint8), ("kstep", np.int32), ("first", np.int64), ("count", np.int32))
COMPRESSIONS = ("lzf", "gzip")
_REQUEST_CHUNK = 1 << 16     # HDF5 chunk of the request datasets (elements)
_SECTOR_CHUNK = 1 << 18      # HDF5 chunk of the sectors dataset (elements, 2 MiB)


def _package_version() -> str:
    try:
        from importlib.metadata import version
        return version("deltasim")
    except Exception:  # pragma: no cover - not installed
        return "unknown"


# ---- writing -------------------------------------------------------------------------------------

def _normalise_chunk(index: int, chunk, sms: int):
    """Request arrays (copies, file dtypes) and the sectors of the requests laid out back to back."""
    arrays = {}
    length = None
    for field, dtype in REQUEST_FIELDS:
        try:
            value = getattr(chunk, field)
        except AttributeError:
            raise TypeError(f"chunk {index}: has no field {field!r} (expected a RequestChunk)") from None
        array = np.asarray(value)
        if array.ndim != 1:
            raise ValueError(f"chunk {index}: field {field} must be 1-D, got shape {array.shape}")
        if length is None:
            length = len(array)
        elif len(array) != length:
            raise ValueError(f"chunk {index}: field {field} has {len(array)} entries, expected {length}")
        arrays[field] = array.astype(dtype, copy=True)
    sectors = np.asarray(chunk.sectors)
    if sectors.ndim != 1:
        raise ValueError(f"chunk {index}: sectors must be 1-D, got shape {sectors.shape}")
    sectors = sectors.astype(np.int64, copy=False)
    first, count = arrays["first"], arrays["count"]
    if length:
        checks = (("count", count < 1, "must be >= 1"),
                  ("first", (first < 0) | (first + count > len(sectors)),
                   f"must index within the chunk's {len(sectors)} sectors"),
                  ("operand", arrays["operand"] > 2, "must be 0 (A), 1 (B) or 2 (C)"),
                  ("kind", arrays["kind"] > 3, "must be 0 (ld), 1 (st), 2 (cp.async.cg) or 3 (cp.async.ca)"),
                  ("sm", (arrays["sm"] < 0) | (arrays["sm"] >= sms), f"must be in [0, {sms})"))
        for field, bad, what in checks:
            if bad.any():
                at = int(np.argmax(bad))
                raise ValueError(f"chunk {index}: request {at}: {field}={arrays[field][at]} {what}")
    total = int(count.sum(dtype=np.int64))
    starts = np.zeros(length, dtype=np.int64)
    if length:
        np.cumsum(count[:-1], out=starts[1:])
    if np.array_equal(starts, first):
        packed = sectors[:total].copy()
    else:  # gather each request's sectors so that requests lie back to back
        gather = np.repeat(first - starts, count) + np.arange(total, dtype=np.int64)
        packed = sectors[gather]
    if total and packed.min() < 0:
        raise ValueError(f"chunk {index}: negative sector address {int(packed.min())}")
    arrays["first"] = starts
    return arrays, packed


def write_trace(path, chunks: Iterable, layer: ConvLayer, kernel: KernelConfig, gpu: GPU, *,
                compression: str = "lzf") -> "TraceFile":
    """Write the request ``chunks`` of ``layer`` run by ``kernel`` on ``gpu`` to the HDF5 file ``path``.

    ``chunks`` is an iterable of `RequestChunk` (e.g. ``traces.iter_request_chunks(layer, gpu, kernel)``),
    consumed once. ``compression`` is ``"lzf"`` (fast, default) or ``"gzip"``. The file appears at
    ``path`` only once it is complete; on any error (or interrupt) nothing is left behind. Returns the
    written file as a `TraceFile`.
    """
    check_instances(layer, gpu, kernel)
    if compression not in COMPRESSIONS:
        raise ValueError(f"compression must be one of {COMPRESSIONS}, got {compression!r}")
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"{path}: output directory {directory} does not exist")
    if os.path.isdir(path):
        raise ValueError(f"{path}: is a directory")

    def write(tmp):
        with h5py.File(tmp, "w") as fh:
            attrs = fh.attrs
            attrs["format"] = FORMAT_NAME
            attrs["format_version"] = FORMAT_VERSION
            attrs["package_version"] = _package_version()
            attrs["layer"] = json.dumps(layer.as_dict())
            attrs["kernel"] = json.dumps(kernel.as_dict())
            attrs["gpu"] = json.dumps(dataclasses.asdict(gpu))
            attrs["compression"] = compression
            options = dict(compression=compression, shuffle=True, fletcher32=True, maxshape=(None,))
            datasets = {field: fh.create_dataset(field, shape=(0,), dtype=dtype, chunks=(_REQUEST_CHUNK,),
                                                 **options)
                        for field, dtype in REQUEST_FIELDS}
            sector_ds = fh.create_dataset("sectors", shape=(0,), dtype=np.int64, chunks=(_SECTOR_CHUNK,),
                                          **options)
            n_requests = n_sectors = 0
            for index, chunk in enumerate(chunks):
                arrays, packed = _normalise_chunk(index, chunk, gpu.sms)
                length = len(arrays["first"])
                if length == 0:
                    continue
                arrays["first"] += n_sectors
                for field, _ in REQUEST_FIELDS:
                    datasets[field].resize((n_requests + length,))
                    datasets[field][n_requests:] = arrays[field]
                sector_ds.resize((n_sectors + len(packed),))
                sector_ds[n_sectors:] = packed
                n_requests += length
                n_sectors += len(packed)
            attrs["requests"] = n_requests
            attrs["sectors"] = n_sectors

    atomic_write(path, write)
    return read_trace(path)


# ---- reading -------------------------------------------------------------------------------------

class TraceFile:
    """An opened (checked) trace file: metadata plus chunked access to the request stream.

    Attributes: ``path``, ``layer`` (`ConvLayer`), ``kernel`` (`KernelConfig`), ``gpu`` (`GPU`),
    ``n_requests``, ``n_sectors``, ``format_version``, ``package_version``, ``compression``.
    The HDF5 file is opened only while chunks are read.
    """

    def __init__(self, path, layer, kernel, gpu, n_requests, n_sectors, format_version, package_version,
                 compression):
        self.path = path
        self.layer = layer
        self.kernel = kernel
        self.gpu = gpu
        self.n_requests = n_requests
        self.n_sectors = n_sectors
        self.format_version = format_version
        self.package_version = package_version
        self.compression = compression

    def __repr__(self):
        return (f"TraceFile({self.path!r}, layer={self.layer.name or 'unnamed'}, gpu={self.gpu.name}, "
                f"requests={self.n_requests}, sectors={self.n_sectors})")

    @property
    def size_bytes(self) -> int:
        return os.path.getsize(self.path)

    def _corrupt(self, problem) -> ValueError:
        return ValueError(f"{self.path}: corrupt trace file: {problem}")

    def iter_chunks(self, max_requests: int = 1 << 16) -> Iterator[RequestChunk]:
        """Yield the requests in issue order, ``max_requests`` at a time, as `RequestChunk` objects
        whose ``first`` indexes the chunk's own ``sectors``."""
        if isinstance(max_requests, bool) or not isinstance(max_requests, (int, np.integer)) \
                or max_requests < 1:
            raise ValueError(f"max_requests must be a positive integer, got {max_requests!r}")
        max_requests = int(max_requests)
        try:
            with h5py.File(self.path, "r") as fh:
                datasets = [fh[field] for field, _ in REQUEST_FIELDS]
                sector_ds = fh["sectors"]
                expected = 0
                for start in range(0, self.n_requests, max_requests):
                    stop = min(start + max_requests, self.n_requests)
                    arrays = [ds[start:stop] for ds in datasets]
                    first, count = arrays[6], arrays[7]
                    if first[0] != expected or np.any(count < 1) or \
                            np.any(first[1:] != first[:-1] + count[:-1]):
                        raise self._corrupt(f"request sector indices inconsistent near request {start}")
                    end = int(first[-1]) + int(count[-1])
                    if end > self.n_sectors:
                        raise self._corrupt(f"request {stop - 1} reads past the {self.n_sectors} sectors")
                    sectors = sector_ds[expected:end]
                    arrays[6] = first - expected
                    expected = end
                    yield RequestChunk(*arrays, sectors)
                if expected != self.n_sectors:
                    raise self._corrupt(f"requests cover {expected} sectors, file holds {self.n_sectors}")
        except (OSError, KeyError, RuntimeError) as err:
            raise self._corrupt(f"{type(err).__name__}: {err}") from None

    def load(self) -> RequestChunk:
        """The whole stream as one `RequestChunk` (``first`` then indexes all sectors); for small traces."""
        if self.n_requests == 0:
            return RequestChunk(*(np.zeros(0, dtype) for _, dtype in REQUEST_FIELDS),
                                np.zeros(0, np.int64))
        chunks = list(self.iter_chunks(max_requests=self.n_requests))
        return chunks[0]


def _json_attr(path, attrs, key, cls):
    if key not in attrs:
        raise ValueError(f"{path}: corrupt trace file: no {key!r} attribute")
    try:
        data = json.loads(attrs[key])
        if cls is GPU:
            data["smem_carveouts"] = tuple(data["smem_carveouts"])
        if cls is ConvLayer:
            for field in ("stride", "pad", "dilation"):
                data[field] = tuple(data[field])
        return cls(**data)
    except (TypeError, ValueError, KeyError) as err:
        raise ValueError(f"{path}: corrupt trace file: bad {key!r} attribute: {err}") from None


def read_trace(path) -> TraceFile:
    """Open and check the trace file ``path``.

    Raises FileNotFoundError if it does not exist, and ValueError (one line naming the path) if it is
    not an HDF5 file, is truncated or corrupt, is not a deltasim trace, or has another format version.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: trace file not found")
    if os.path.isdir(path):
        raise ValueError(f"{path}: is a directory, not a trace file")
    try:
        is_hdf5 = h5py.is_hdf5(path)
    except OSError as err:
        raise ValueError(f"{path}: cannot read trace file: {err}") from None
    if not is_hdf5:
        raise ValueError(f"{path}: not an HDF5 file")
    try:
        with h5py.File(path, "r") as fh:
            attrs = fh.attrs
            fmt = attrs.get("format")
            if isinstance(fmt, bytes):
                fmt = fmt.decode("utf-8", "replace")
            if fmt != FORMAT_NAME:
                raise ValueError(f"{path}: not a deltasim trace file (format attribute {fmt!r}, "
                                 f"expected {FORMAT_NAME!r})")
            version = attrs.get("format_version")
            version = version.item() if isinstance(version, np.generic) else version
            if version != FORMAT_VERSION:
                raise ValueError(f"{path}: trace format version {version!r} is not supported "
                                 f"(this deltasim reads version {FORMAT_VERSION}); regenerate the trace")
            for key in ("requests", "sectors"):
                if key not in attrs:
                    raise ValueError(f"{path}: corrupt trace file: no {key!r} attribute (incomplete write?)")
            n_requests, n_sectors = int(attrs["requests"]), int(attrs["sectors"])
            for field, dtype in REQUEST_FIELDS + (("sectors", np.int64),):
                if field not in fh or not isinstance(fh[field], h5py.Dataset):
                    raise ValueError(f"{path}: corrupt trace file: dataset {field!r} missing")
                ds = fh[field]
                want = n_sectors if field == "sectors" else n_requests
                if ds.dtype != np.dtype(dtype) or ds.shape != (want,):
                    raise ValueError(f"{path}: corrupt trace file: dataset {field!r} is {ds.dtype} "
                                     f"{ds.shape}, expected {np.dtype(dtype)} ({want},)")
            layer = _json_attr(path, attrs, "layer", ConvLayer)
            kernel = _json_attr(path, attrs, "kernel", KernelConfig)
            gpu = _json_attr(path, attrs, "gpu", GPU)
            package_version = str(attrs.get("package_version", "unknown"))
            compression = str(attrs.get("compression", "unknown"))
    except (OSError, KeyError, RuntimeError) as err:
        raise ValueError(f"{path}: cannot read trace file (truncated or corrupt?): "
                         f"{' '.join(str(err).split())}") from None
    return TraceFile(path, layer, kernel, gpu, n_requests, n_sectors, FORMAT_VERSION, package_version,
                     compression)


# ---- replay --------------------------------------------------------------------------------------

def replay(trace, hierarchy=None, *, max_requests: int = 1 << 16) -> dict:
    """Feed a stored trace through a cache hierarchy and return its metrics.

    ``trace`` is a `TraceFile` or a path. ``hierarchy`` defaults to
    ``simcore.Hierarchy.for_gpu(gpu, kernel.l1_config(gpu))`` with the GPU and kernel stored in the
    file, so ``replay(path)`` reproduces ``traces.simulate_layer(layer, gpu, kernel)``.
    """
    if not isinstance(trace, TraceFile):
        trace = read_trace(trace)
    if hierarchy is None:
        from simcore.hierarchy import Hierarchy
        hierarchy = Hierarchy.for_gpu(trace.gpu, trace.kernel.l1_config(trace.gpu))
    for chunk in trace.iter_chunks(max_requests=max_requests):
        hierarchy.feed(chunk.sm, chunk.operand, chunk.kind, chunk.first, chunk.count, chunk.sectors)
    return hierarchy.metrics()
