"""`ReuseFactors`: the named, continuous parameters of the analytic model (DESIGN section 7).

Every effect the model does not count exactly is one float field here, with a documented default
and bounds (`ReuseFactors.BOUNDS`), so `validation.calibrate` can fit them generically through
`dataclasses.fields`. Files are JSON: ``{"format": "deltasim-factors", "version": 1, "factors":
{name: value, ...}}`` (a bare ``{name: value}`` mapping is accepted too).
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile

from simcore._frozen import hash_once

FORMAT = "deltasim-factors"
VERSION = 2


@hash_once
@dataclasses.dataclass(frozen=True)
class ReuseFactors:
    """Named reuse/capacity factors of the analytic model (see analytic/MODEL.md).

    Parameters
    ----------
    l1_hit_lo, l1_hit_hi : float
        L1 LRU cliff, as a linear ramp of the hit probability of a reuse against its distance
        x = (distinct lines mapped to the reused line's set between the two accesses) / ways:
        hit probability 1 for x <= l1_hit_lo, 0 for x >= l1_hit_hi, linear in between.
        Defaults 1.0 and 1.06: LRU keeps a line while fewer than ``ways`` other lines of its set
        are touched; the model's distance counts the window's distinct lines including the
        reused one, so x = 1.0 still hits (the cliff starts at 1); the ramp absorbs the spread of
        distances around the per-filter-position mean.
    l1_tile_edge : float
        Scale of the loss of within-CTA input reuse at tile edges: the fraction of row pairs
        (m, m + delta) that straddle a tile boundary is l1_tile_edge * |delta| / tile_m
        (1.0: uniform tile positions).
    l2_capacity : float
        Effective fraction of the L2 capacity that LRU keeps useful for a reuse (lines partly
        valid, hash imbalance). Default 0.97.
    l2_cliff_spread : float
        Scale of the spread of the L2's LRU cliff around its capacity. The miss probability of a
        reuse is P(Poisson(ways x) >= ways), x = distinct lines in its window / useful capacity
        (the window's lines spread over the sets by the hash); 1.0 is that spread, smaller is a
        sharper cliff (a hash that spreads lines more evenly than at random). Default 1.0.
    l2_dirty_capacity : float
        Effective fraction of L2 holding the most recent lines at kernel end (dirty sectors left).
        Default 0.985.
    """

    l1_hit_lo: float = 1.0
    l1_hit_hi: float = 1.06
    l1_tile_edge: float = 1.0
    l2_capacity: float = 0.97
    l2_cliff_spread: float = 0.12
    l2_dirty_capacity: float = 0.985

    BOUNDS = {
        "l1_hit_lo": (0.1, 2.0),
        "l1_hit_hi": (0.2, 4.0),
        "l1_tile_edge": (0.0, 3.0),
        "l2_capacity": (0.3, 1.5),
        "l2_cliff_spread": (0.02, 3.0),
        "l2_dirty_capacity": (0.3, 1.2),
    }

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"ReuseFactors.{field.name} must be a number, got {value!r}")
            value = float(value)
            if not math.isfinite(value):
                raise ValueError(f"ReuseFactors.{field.name} must be finite, got {value!r}")
            lo, hi = self.BOUNDS[field.name]
            if not lo <= value <= hi:
                raise ValueError(f"ReuseFactors.{field.name}={value!r} is outside its bounds [{lo}, {hi}]")
            object.__setattr__(self, field.name, value)
        if self.l1_hit_hi <= self.l1_hit_lo:
            raise ValueError(f"ReuseFactors.l1_hit_hi={self.l1_hit_hi} must exceed "
                             f"l1_hit_lo={self.l1_hit_lo}")

    # ---- (de)serialisation ----------------------------------------------------------------
    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, data) -> "ReuseFactors":
        if not isinstance(data, dict):
            raise ValueError(f"ReuseFactors: expected a mapping, got {type(data).__name__}")
        if "factors" in data or "format" in data:
            fmt = data.get("format")
            if fmt != FORMAT:
                raise ValueError(f"ReuseFactors: format must be {FORMAT!r}, got {fmt!r}")
            version = data.get("version")
            if version != VERSION:
                raise ValueError(f"ReuseFactors: unsupported version {version!r} (expected {VERSION})")
            extra = set(data) - {"format", "version", "factors", "meta"}
            if extra:
                raise ValueError(f"ReuseFactors: unknown key {sorted(extra)[0]!r}")
            data = data.get("factors")
            if not isinstance(data, dict):
                raise ValueError("ReuseFactors: 'factors' must be a mapping")
        names = {f.name for f in dataclasses.fields(cls)}
        for key in data:
            if key not in names:
                raise ValueError(f"ReuseFactors: unknown factor {key!r}; known: {', '.join(sorted(names))}")
        return cls(**data)

    @classmethod
    def load(cls, path) -> "ReuseFactors":
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
        except FileNotFoundError:
            raise ValueError(f"ReuseFactors: no such file {str(path)!r}") from None
        except json.JSONDecodeError as err:
            raise ValueError(f"ReuseFactors: {str(path)!r} is not valid JSON: {err}") from None
        return cls.from_dict(data)

    def save(self, path, meta: dict | None = None) -> None:
        """Write JSON atomically (temporary file, then rename)."""
        doc = {"format": FORMAT, "version": VERSION, "factors": self.to_dict()}
        if meta:
            doc["meta"] = meta
        path = os.fspath(path)
        folder = os.path.dirname(os.path.abspath(path))
        fd, tmp = tempfile.mkstemp(prefix=".factors-", suffix=".tmp", dir=folder)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(doc, fh, indent=2, sort_keys=True)
                fh.write("\n")
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise


def resolve_factors(factors) -> ReuseFactors:
    """None -> defaults; a ReuseFactors; or a path to its JSON file."""
    if factors is None:
        return _DEFAULT
    if isinstance(factors, ReuseFactors):
        return factors
    if isinstance(factors, (str, os.PathLike)):
        return ReuseFactors.load(factors)
    if isinstance(factors, dict):
        return ReuseFactors.from_dict(factors)
    raise TypeError(f"factors must be a ReuseFactors, a path or None, got {type(factors).__name__}")


_DEFAULT = ReuseFactors()
