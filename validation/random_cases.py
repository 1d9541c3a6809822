"""Reproducible random (layer, kernel, GPU) cases for the model-vs-simulation accuracy sweep.

``random_cases(count, seed)`` draws ``count`` valid cases; case ``i`` depends only on ``(seed, i)``
(its own ``numpy.random.Generator(PCG64([seed, i]))``), so ``--random 300 --seed 1`` and
``--random 20 --seed 1`` share their first 20 cases and any case can be redrawn alone
(``random_case(seed, i)``). A draw that is invalid (a thread map that does not tile, a kernel that
does not fit the GPU, C not a multiple of the vector, more simulated sectors than the cap) is
redrawn from the same generator, so the distribution below is that of *valid* cases.

Distribution (each choice independent unless said):

Layer (``ConvLayer``), one family of real CNNs, uniformly:

* ``body3x3``: 3x3, pad 1, stride 1 (stride 2 with probability 0.2); C, K in {32, ..., 1024}
  (powers of two and their 1.5 multiples, log-uniform); H in [7, 112].
* ``proj1x1``: 1x1, pad 0, stride 1 or 2 (0.3); C, K in {16, ..., 2048}; H in [7, 56].
* ``stem``: C in [3, 8]; 5x5, 7x7 or 11x11 filters, stride 2-4, pad (R - 1) // 2 or 0;
  K in {16, ..., 96}; H in [96, 300].
* ``asym``: 1x7 or 7x1 (pad 3 on the long axis), stride 1; C, K in {64, ..., 384}; H in [12, 35].
* ``dilated``: 3x3 with dilation 2-4 and pad = dilation, stride 1; C, K in {32, ..., 512};
  H in [14, 64].
* ``conv5x5``: 5x5, pad 2, stride 1 (stride 2 with probability 0.2); C in {16, ..., 192},
  K in {32, ..., 256}; H in [7, 56].

W = H with probability 0.7, else drawn independently in H's range. Batch N: log-uniform in [1, 64].

Kernel (``KernelConfig``): tile_m and tile_n in {32, 64, 128, 256}; tile_k in {8, 16, 32}; threads in
{64, 128, 256}; dtype fp32 or fp16; layout nhwc (0.75) or nchw; vector 1 (always for nchw) or, for
nhwc, the largest of {2, 4, 8} (with probability 0.5) that fits 16 bytes and divides C;
swizzle_log 0 (0.5) or 1-3; ctas_per_sm forced (0.2) to a value from 1 to the occupancy limit.

Math: with probability 0.25 (a generator of its own, ``PCG64([seed, i, 3])``, drawn after the kernel), on
a GPU with tensor cores, the kernel becomes an SM80 tensor-op one (``math="tensorop"``, DESIGN section 3a):
tile_m in {64, 128, 256}, tile_n in {64, 128, 256}, tile_k in {32, 64}, threads in {64, 128, 256}, stages
3 or 4, fp16 or (where the tensor cores take it) bf16, the SIMT draw's swizzle; a draw the warp-raked map
cannot tile or that does not fit the GPU keeps the SIMT kernel. Tensor-op kernels are fprop.

Op: for nhwc kernels, fprop (0.5), dgrad (0.25) or wgrad (0.25), drawn last from a generator of its
own (``PCG64([seed, i, 1])``), so the layer, GPU and kernel of a case do not depend on it; a backward
pass the kernel cannot run on the layer (its vector does not divide K) stays fprop. nchw kernels are
fprop (DESIGN section 3a defines the backward passes for nhwc).

Groups: an fprop nhwc SIMT case becomes grouped with probability 0.25, drawn after everything else from a
generator of its own (``PCG64([seed, i, 2])``), so every other case is unchanged and a grouped case keeps
its family, GPU and kernel: depthwise (0.5; K = C = groups, needs vector 1) or grouped (groups drawn
uniformly from those in {2, 4, 8, 16, 32, 64} that divide C and K, give C/groups a multiple of the vector
and K/groups a multiple or a divisor of tile_n, traces/KERNELS.md's group-mode rule). A case where no
such grouping exists, or whose grouped simulation exceeds the cap even at batch 1, stays dense; the cap
halves the batch of a grouped case like any other. Its layer name ends in ``_g<groups>``.

GPU: one of the stock GPUs (titanxp, p100, v100, a100, h100, h200), then, each with probability
0.35, a hypothetical change through ``simcore.replace_gpu`` (geometry kept consistent): L2 capacity
x {0.25, 0.5, 0.75, 1.5, 2, 3, 4}; SMs x {0.5, 0.75, 1.25, 1.5, 2}; L2 slices x {0.5, 2}; unified
L1 x {0.5, 1.5, 2} (GPUs whose L1 is separate: the L1 alone).

Cap: a case whose simulation would look up more than ``max_sectors`` (default 400 M) L1 load plus
store sectors has its batch halved until it fits (then redrawn if batch 1 is still too big), so
``--random 300`` simulates in about 20 minutes on 2 cores.
"""
from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import numpy as np

__all__ = ["RandomCase", "random_case", "random_cases", "FAMILIES", "DEFAULT_MAX_SECTORS"]

FAMILIES = ("body3x3", "proj1x1", "stem", "asym", "dilated", "conv5x5")
STOCK_GPUS = ("titanxp", "p100", "v100", "a100", "h100", "h200")
DEFAULT_MAX_SECTORS = 400_000_000
_ATTEMPTS = 200


class RandomCase(NamedTuple):
    """One drawn case: ``index`` within the seed's sequence, the layer, GPU and kernel, and a short
    description of how the GPU was changed from its stock model (``""`` if stock)."""

    seed: int
    index: int
    layer: object
    gpu: object
    kernel: object
    gpu_change: str

    @property
    def label(self) -> str:
        return f"random{self.seed}/{self.index}:{self.layer.name}@{self.gpu.name}"

    def command(self, factors: str | None = None, max_sectors: int | None = None) -> str:
        """A one-line command that simulates and predicts this case again: with ``factors``, that factors
        file; with a ``max_sectors`` other than the default, the cap that drew the case."""
        cmd = f"python -m validation.accuracy --random {self.index + 1} --seed {self.seed} --case {self.index}"
        if max_sectors and max_sectors != DEFAULT_MAX_SECTORS:
            cmd += f" --max-sectors {max_sectors}"
        return cmd + (f" --factors {factors}" if factors else "")

    def describe(self) -> str:
        l, k = self.layer, self.kernel
        geo = (f"n{l.n} c{l.c} {l.h}x{l.w} k{l.k} {l.r}x{l.s} s{l.stride[0]}x{l.stride[1]} "
               f"p{l.pad[0]}x{l.pad[1]} d{l.dilation[0]}x{l.dilation[1]}" + (f" g{l.groups}" if l.groups > 1 else ""))
        ker = (f"{k.op} {k.tile_m}x{k.tile_n}x{k.tile_k} t{k.threads} {k.layout} {k.dtype} v{k.vector} "
               f"{'tensorop s' + str(k.stages) + ' ' if k.math == 'tensorop' else ''}"
               f"swz{k.swizzle_log}" + (f" cta{k.ctas_per_sm}" if k.ctas_per_sm else ""))
        gpu = self.gpu.name + (f" ({self.gpu_change})" if self.gpu_change else "")
        return f"{geo} | {ker} | {gpu}"


def _channels(rng, lo, hi):
    """Log-uniform over powers of two and their 1.5 multiples in [lo, hi]."""
    values = sorted({v for p in range(0, 13) for v in (1 << p, 3 << (p - 1) if p else 1) if lo <= v <= hi})
    return int(values[int(rng.integers(len(values)))])


def _size(rng, lo, hi):
    return int(rng.integers(lo, hi + 1))


def _draw_layer(rng, name):
    from traces import ConvLayer
    family = FAMILIES[int(rng.integers(len(FAMILIES)))]
    if family == "body3x3":
        c, k = _channels(rng, 32, 1024), _channels(rng, 32, 1024)
        h, lo_hi = _size(rng, 7, 112), (7, 112)
        r = s = 3
        stride, pad, dil = (2 if rng.random() < 0.2 else 1), 1, 1
    elif family == "proj1x1":
        c, k = _channels(rng, 16, 2048), _channels(rng, 16, 2048)
        h, lo_hi = _size(rng, 7, 56), (7, 56)
        r = s = 1
        stride, pad, dil = (2 if rng.random() < 0.3 else 1), 0, 1
    elif family == "stem":
        c, k = _size(rng, 3, 8), _channels(rng, 16, 96)
        h, lo_hi = _size(rng, 96, 300), (96, 300)
        r = s = int(rng.choice([5, 7, 11]))
        stride = _size(rng, 2, 4)
        pad, dil = ((r - 1) // 2 if rng.random() < 0.7 else 0), 1
    elif family == "asym":
        c, k = _channels(rng, 64, 384), _channels(rng, 64, 384)
        h, lo_hi = _size(rng, 12, 35), (12, 35)
        if rng.random() < 0.5:
            r, s, pad = 1, 7, (0, 3)
        else:
            r, s, pad = 7, 1, (3, 0)
        stride, dil = 1, 1
    elif family == "dilated":
        c, k = _channels(rng, 32, 512), _channels(rng, 32, 512)
        h, lo_hi = _size(rng, 14, 64), (14, 64)
        r = s = 3
        dil = _size(rng, 2, 4)
        stride, pad = 1, dil
    else:  # conv5x5
        c, k = _channels(rng, 16, 192), _channels(rng, 32, 256)
        h, lo_hi = _size(rng, 7, 56), (7, 56)
        r = s = 5
        stride, pad, dil = (2 if rng.random() < 0.2 else 1), 2, 1
    w = h if rng.random() < 0.7 else _size(rng, *lo_hi)
    n = int(round(math.exp(rng.uniform(0.0, math.log(64.0)))))
    return ConvLayer(max(1, n), c, h, w, k, r, s, stride=stride, pad=pad, dilation=dil,
                     name=f"{family}_{name}")


def _draw_gpu(rng):
    import simcore
    base = simcore.gpu(STOCK_GPUS[int(rng.integers(len(STOCK_GPUS)))])
    changes, notes = {}, []
    if rng.random() < 0.35:
        f = float(rng.choice([0.25, 0.5, 0.75, 1.5, 2.0, 3.0, 4.0]))
        changes["l2_bytes"] = f
    if rng.random() < 0.35:
        changes["sms"] = float(rng.choice([0.5, 0.75, 1.25, 1.5, 2.0]))
    if rng.random() < 0.35:
        changes["l2_slices"] = float(rng.choice([0.5, 2.0]))
    if rng.random() < 0.35:
        changes["l1_smem_bytes"] = float(rng.choice([0.5, 1.5, 2.0]))
    if not changes:
        return base, ""
    gpu = simcore.scale_gpu(base, changes)
    notes = [f"{field}x{factor:g}" for field, factor in changes.items()]
    return gpu, " ".join(notes)


def _draw_kernel(rng, layer, gpu):
    from traces import KernelConfig
    tm = int(rng.choice([32, 64, 128, 256]))
    tn = int(rng.choice([32, 64, 128, 256]))
    tk = int(rng.choice([8, 16, 32]))
    threads = int(rng.choice([64, 128, 256]))
    dtype = "fp32" if rng.random() < 0.5 else "fp16"
    layout = "nhwc" if rng.random() < 0.75 else "nchw"
    eb = 4 if dtype == "fp32" else 2
    vector = 1
    if layout == "nhwc" and rng.random() < 0.5:
        for v in (8, 4, 2):
            if v * eb <= 16 and layer.c % v == 0 and tk % v == 0:
                vector = v
                break
    swizzle = 0 if rng.random() < 0.5 else int(rng.integers(1, 4))
    kernel = KernelConfig(tile_m=tm, tile_n=tn, tile_k=tk, threads=threads, layout=layout, dtype=dtype,
                          vector=vector, swizzle_log=swizzle)
    occupancy = kernel.resident_ctas(gpu)
    if rng.random() < 0.2:
        kernel = dataclasses.replace(kernel, ctas_per_sm=int(rng.integers(1, occupancy + 1)))
    kernel.l1_config(gpu)
    return kernel


def _draw_math(seed, index, gpu, kernel):
    """The kernel, or (module docstring) a tensor-op kernel in its place."""
    from traces import KernelConfig
    rng = np.random.Generator(np.random.PCG64([int(seed), int(index), 3]))
    if rng.random() >= 0.25 or not gpu.tensor_dtypes or not gpu.tensor_tflops > 0:
        return kernel
    tm, tn = (int(rng.choice([64, 128, 256])) for _ in range(2))
    tk = int(rng.choice([32, 64]))
    threads = int(rng.choice([64, 128, 256]))
    stages = int(rng.choice([3, 4]))
    dtype = str(rng.choice(gpu.tensor_dtypes))
    try:
        tensorop = KernelConfig(tile_m=tm, tile_n=tn, tile_k=tk, threads=threads, dtype=dtype, vector=8,
                                stages=stages, swizzle_log=kernel.swizzle_log, math="tensorop")
        tensorop.l1_config(gpu)
    except ValueError:
        return kernel
    return tensorop


def _draw_op(seed, index, layer, kernel):
    """The kernel with the case's op (module docstring)."""
    if kernel.layout != "nhwc" or kernel.math != "simt":
        return kernel
    u = np.random.Generator(np.random.PCG64([int(seed), int(index), 1])).random()
    if u < 0.5:
        return kernel
    try:
        backward = dataclasses.replace(kernel, op="dgrad" if u < 0.75 else "wgrad")
        backward.check_layer(layer)
    except ValueError:
        return kernel
    return backward


def _draw_groups(seed, index, layer, kernel, max_sectors):
    """The case's layer, grouped or depthwise with probability 0.25 (module docstring), else unchanged."""
    if kernel.op != "fprop" or kernel.layout != "nhwc" or kernel.math != "simt":
        return layer
    rng = np.random.Generator(np.random.PCG64([int(seed), int(index), 2]))
    if rng.random() >= 0.25:
        return layer
    if rng.random() < 0.5:
        if kernel.vector != 1:
            return layer
        grouped = dataclasses.replace(layer, k=layer.c, groups=layer.c)
    else:
        options = [g for g in (2, 4, 8, 16, 32, 64) if layer.c % g == 0 and layer.k % g == 0
                   and (layer.c // g) % kernel.vector == 0
                   and ((layer.k // g) % kernel.tile_n == 0 or kernel.tile_n % (layer.k // g) == 0)]
        if not options:
            return layer
        grouped = dataclasses.replace(layer, groups=int(options[int(rng.integers(len(options)))]))
    grouped = dataclasses.replace(grouped, name=f"{layer.name}_g{grouped.groups}")
    kernel.check_layer(grouped)
    while simulated_sectors(grouped, kernel) > max_sectors and grouped.n > 1:
        grouped = grouped.with_batch(grouped.n // 2)
    return grouped if simulated_sectors(grouped, kernel) <= max_sectors else layer


def simulated_sectors(layer, kernel) -> int:
    """L1 load + store sectors the simulation of ``layer`` looks up (exact, closed form)."""
    from analytic._counts import l1_counts
    counts = l1_counts(layer, kernel)
    return int(counts["sec_A"] + counts["sec_B"] + counts["sec_C"])


def random_case(seed: int, index: int, max_sectors: int = DEFAULT_MAX_SECTORS) -> RandomCase:
    """Case ``index`` of the sequence of ``seed`` (independent of how many cases are drawn)."""
    for name, value in (("seed", seed), ("index", index)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise ValueError(f"random_case: {name} must be a non-negative integer, got {value!r}")
    if isinstance(max_sectors, bool) or not isinstance(max_sectors, (int, np.integer)) or max_sectors < 1:
        raise ValueError(f"random_case: max_sectors must be a positive integer, got {max_sectors!r}")
    rng = np.random.Generator(np.random.PCG64([int(seed), int(index)]))
    for _ in range(_ATTEMPTS):
        try:
            layer = _draw_layer(rng, f"{seed}_{index}")
            gpu, change = _draw_gpu(rng)
            kernel = _draw_op(seed, index, layer, _draw_math(seed, index, gpu, _draw_kernel(rng, layer, gpu)))
        except ValueError:
            continue                      # a thread map that does not tile, a kernel that does not fit
        while simulated_sectors(layer, kernel) > max_sectors and layer.n > 1:
            layer = layer.with_batch(layer.n // 2)
        if simulated_sectors(layer, kernel) > max_sectors:
            continue
        layer = _draw_groups(seed, index, layer, kernel, max_sectors)
        return RandomCase(int(seed), int(index), layer, gpu, kernel, change)
    raise RuntimeError(f"random_case: no valid case in {_ATTEMPTS} draws (seed {seed}, index {index})")


def random_cases(count: int, seed: int, max_sectors: int = DEFAULT_MAX_SECTORS) -> list:
    """``count`` cases of the sequence of ``seed`` (see the module docstring)."""
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 1:
        raise ValueError(f"random_cases: count must be a positive integer, got {count!r}")
    return [random_case(seed, i, max_sectors) for i in range(int(count))]
