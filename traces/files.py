"""``atomic_write(path, writer)``: write a file so that it appears whole or not at all (``write_text``:
a string, so).

One helper for every output file of the package (trace files, JSON, HDF5 results, plots, caches):
a CLI that fails or is interrupted never leaves a half-written file behind.
"""
from __future__ import annotations

import os
import tempfile

__all__ = ["atomic_write", "write_text"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path, writer) -> None:
    """Call ``writer(tmp_path)`` on a temporary file in ``path``'s folder, then rename it to ``path``.

    The temporary name keeps ``path``'s extension (some writers, matplotlib's among them, look at it)
    and gets the permissions a plain ``open(path, "w")`` would (``mkstemp`` makes it 0600). On any
    error, ``KeyboardInterrupt`` included, the temporary file is removed and ``path`` is left as it was.
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    base, ext = os.path.splitext(os.path.basename(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{base}.", suffix=f".tmp{ext}", dir=folder)
    os.close(fd)
    try:
        os.chmod(tmp, 0o666 & ~_umask())
        writer(tmp)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_text(path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` with `atomic_write`."""
    def writer(tmp):
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
    atomic_write(path, writer)
