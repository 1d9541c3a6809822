"""Cache geometry (`CacheConfig`) and the counts a simulation returns (`CacheStats`)."""
from __future__ import annotations

import dataclasses
import numbers

INDEX_FUNCTIONS = ("linear", "xor")


def check_positive_int(owner: str, field: str, value) -> int:
    """Return ``value`` as an int, or raise TypeError/ValueError naming ``owner.field``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{owner}.{field} must be an integer, got {value!r}")
    if value <= 0:
        raise ValueError(f"{owner}.{field} must be positive, got {value!r}")
    return int(value)


def is_power_of_two(value: int) -> bool:
    return value > 0 and (value & (value - 1)) == 0


@dataclasses.dataclass(frozen=True)
class CacheConfig:
    """Geometry of one sectored, set-associative LRU cache (DESIGN section 4).

    Parameters
    ----------
    size_bytes : int
        Capacity; a multiple of ``line_bytes * ways``.
    ways : int
        Associativity.
    line_bytes : int
        Line (tag) size, a power of two; 128 on every NVIDIA GPU since Fermi.
    sector_bytes : int
        Sector size, a power of two dividing ``line_bytes`` (32 on NVIDIA GPUs).
        ``sector_bytes == line_bytes`` gives a plain line cache.
    index : {"linear", "xor"}
        Set index function: ``line mod sets`` or the xor-fold of DESIGN section 4
        (needs a power-of-two number of sets).
    """

    size_bytes: int
    ways: int
    line_bytes: int = 128
    sector_bytes: int = 32
    index: str = "linear"

    def __post_init__(self):
        for field in ("size_bytes", "ways", "line_bytes", "sector_bytes"):
            object.__setattr__(self, field, check_positive_int("CacheConfig", field, getattr(self, field)))
        if not is_power_of_two(self.line_bytes):
            raise ValueError(f"CacheConfig.line_bytes must be a power of two, got {self.line_bytes}")
        if not is_power_of_two(self.sector_bytes) or self.sector_bytes > self.line_bytes:
            raise ValueError(
                f"CacheConfig.sector_bytes must be a power of two no larger than line_bytes "
                f"({self.line_bytes}), got {self.sector_bytes}")
        if self.line_bytes // self.sector_bytes > 8:
            raise ValueError(
                f"CacheConfig.sector_bytes={self.sector_bytes}: at most 8 sectors per line are supported "
                f"(line_bytes={self.line_bytes})")
        if self.size_bytes % (self.line_bytes * self.ways):
            raise ValueError(
                f"CacheConfig.size_bytes={self.size_bytes} is not a multiple of line_bytes * ways "
                f"= {self.line_bytes} * {self.ways}")
        if self.index not in INDEX_FUNCTIONS:
            raise ValueError(f"CacheConfig.index must be one of {INDEX_FUNCTIONS}, got {self.index!r}")
        if self.index == "xor" and not is_power_of_two(self.sets):
            raise ValueError(
                f"CacheConfig.index='xor' needs a power-of-two number of sets, got sets={self.sets}")

    @property
    def sets(self) -> int:
        return self.size_bytes // (self.line_bytes * self.ways)

    @property
    def lines(self) -> int:
        return self.size_bytes // self.line_bytes

    @property
    def sectors_per_line(self) -> int:
        return self.line_bytes // self.sector_bytes


@dataclasses.dataclass(frozen=True)
class CacheStats:
    """Counts of one cache simulation.

    ``misses`` = sector misses + tag misses; ``hits + misses == accesses``.
    Write counts are zero when the trace had no writes. ``dirty_evictions`` counts
    dirty *sectors* written below on eviction; ``dirty_at_end`` those still dirty.
    """

    accesses: int
    hits: int
    misses: int
    tag_misses: int
    read_accesses: int = 0
    read_hits: int = 0
    write_accesses: int = 0
    write_hits: int = 0
    dirty_evictions: int = 0
    dirty_at_end: int = 0

    @property
    def sector_misses(self) -> int:
        return self.misses - self.tag_misses

    @property
    def hit_rate(self) -> float:
        return self.hits / self.accesses if self.accesses else 0.0

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)
