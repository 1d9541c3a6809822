"""`ConvLayer`: one forward convolution layer and its implicit-GEMM dimensions (DESIGN section 3)."""
from __future__ import annotations

import dataclasses
import numbers


def _pair(owner: str, field: str, value, minimum: int) -> tuple:
    items = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
    if len(items) != 2:
        raise ValueError(f"{owner}.{field} must be an int or an (h, w) pair, got {value!r}")
    for item in items:
        if isinstance(item, bool) or not isinstance(item, numbers.Integral):
            raise TypeError(f"{owner}.{field} must be an integer or a pair of integers, got {value!r}")
        if item < minimum:
            raise ValueError(f"{owner}.{field} must be >= {minimum}, got {value!r}")
    return int(items[0]), int(items[1])


def _positive(owner: str, field: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{owner}.{field} must be an integer, got {value!r}")
    if value <= 0:
        raise ValueError(f"{owner}.{field} must be positive, got {value!r}")
    return int(value)


@dataclasses.dataclass(frozen=True)
class ConvLayer:
    """A 2-D forward convolution: input (n, c, h, w), filters (k, c / groups, r, s).

    ``stride``, ``pad`` and ``dilation`` are an int or an (h, w) pair; they are stored as pairs.
    Output size P = (h + 2 pad_h - dil_h (r - 1) - 1) // stride_h + 1 (Q likewise).
    ``groups`` splits the channels into ``groups`` independent convolutions (ONNX / PyTorch
    ``group``): output channel k reads input channels g c/groups .. (g + 1) c/groups - 1,
    g = k // (k / groups); ``groups == c == k`` is a depthwise convolution. ``c`` and ``k`` must be
    multiples of ``groups``.
    """

    n: int
    c: int
    h: int
    w: int
    k: int
    r: int
    s: int
    stride: tuple = 1
    pad: tuple = 0
    dilation: tuple = 1
    name: str = ""
    groups: int = 1

    def __post_init__(self):
        label = f"ConvLayer{f' {self.name!r}' if self.name else ''}"
        for field in ("n", "c", "h", "w", "k", "r", "s"):
            object.__setattr__(self, field, _positive(label, field, getattr(self, field)))
        object.__setattr__(self, "stride", _pair(label, "stride", self.stride, 1))
        object.__setattr__(self, "pad", _pair(label, "pad", self.pad, 0))
        object.__setattr__(self, "dilation", _pair(label, "dilation", self.dilation, 1))
        object.__setattr__(self, "groups", _positive(label, "groups", self.groups))
        for field in ("c", "k"):
            if getattr(self, field) % self.groups:
                raise ValueError(f"{label}: {field}={getattr(self, field)} is not a multiple of "
                                 f"groups={self.groups}")
        if not isinstance(self.name, str):
            raise TypeError(f"ConvLayer.name must be a string, got {self.name!r}")
        for axis, size, filt, pad, dil in (("h", self.h, self.r, self.pad[0], self.dilation[0]),
                                           ("w", self.w, self.s, self.pad[1], self.dilation[1])):
            span = dil * (filt - 1) + 1
            if span > size + 2 * pad:
                raise ValueError(
                    f"{label}: filter larger than the padded input along {axis}: dilated filter span {span} "
                    f"> {axis} + 2*pad = {size + 2 * pad}")
        object.__setattr__(self, "_shape", (self.n, self.c, self.h, self.w, self.k, self.r, self.s, self.stride,
                                            self.pad, self.dilation, self.groups))

    @property
    def shape(self) -> tuple:
        """Every field but the name: layers of one shape have the same figures (the model's memo)."""
        return self._shape

    # ---- derived figures -------------------------------------------------------------------
    @property
    def p(self) -> int:
        return (self.h + 2 * self.pad[0] - self.dilation[0] * (self.r - 1) - 1) // self.stride[0] + 1

    @property
    def q(self) -> int:
        return (self.w + 2 * self.pad[1] - self.dilation[1] * (self.s - 1) - 1) // self.stride[1] + 1

    @property
    def gemm_m(self) -> int:
        return self.n * self.p * self.q

    @property
    def gemm_n(self) -> int:
        return self.k

    @property
    def c_per_group(self) -> int:
        """Input channels each filter reads: c / groups."""
        return self.c // self.groups

    @property
    def k_per_group(self) -> int:
        """Filters of each group: k / groups."""
        return self.k // self.groups

    @property
    def gemm_k(self) -> int:
        """Reduction length of one output element: (c / groups) r s."""
        return self.c_per_group * self.r * self.s

    @property
    def flops(self) -> int:
        """Multiply-adds counted as 2 FLOPs: 2 M N K (K = (c / groups) r s)."""
        return 2 * self.gemm_m * self.gemm_n * self.gemm_k

    @property
    def params(self) -> int:
        """Filter weights (no bias): k (c / groups) r s."""
        return self.k * self.c_per_group * self.r * self.s

    @property
    def input_elements(self) -> int:
        return self.n * self.c * self.h * self.w

    @property
    def output_elements(self) -> int:
        return self.n * self.k * self.p * self.q

    def with_batch(self, n: int) -> "ConvLayer":
        return dataclasses.replace(self, n=n)

    def as_dict(self) -> dict:
        return {"name": self.name, "n": self.n, "c": self.c, "h": self.h, "w": self.w, "k": self.k,
                "r": self.r, "s": self.s, "stride": list(self.stride), "pad": list(self.pad),
                "dilation": list(self.dilation), **({"groups": self.groups} if self.groups != 1 else {})}
