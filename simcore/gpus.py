"""GPU descriptions (DESIGN section 6).

`GPU` is a frozen dataclass of *primary* figures only; every derived figure (L1 capacity left by a
kernel's shared memory, L1 ways, L2 sets per slice, CTA occupancy) is a method or property, so a
hypothetical GPU made with ``dataclasses.replace(gpu("v100"), sms=160, l2_bytes=12 << 20)`` stays
consistent.

Sources (numbers in brackets are cited next to each figure below):

[V]  NVIDIA Tesla V100 GPU Architecture whitepaper (WP-08608-001_v1.1, 2017): 80 SMs, 1530 MHz boost,
     15.7 FP32 TFLOP/s, 125 tensor TFLOP/s (FP16 inputs; Volta's tensor cores take no BF16), 128 KB
     unified L1/shared per SM with carve-outs 0/8/16/32/64/96 KB, 6 MB L2, 900 GB/s HBM2.
[A]  NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020): 108 SMs, 1410 MHz, 19.5 FP32 TFLOP/s,
     312 FP16 and 312 BF16 dense tensor TFLOP/s (624 with sparsity), 192 KB L1/shared per SM, shared
     carve-outs 0/8/16/32/64/100/132/164 KB, 40 MB L2, 1555 GB/s HBM2 (40 GB part); L2 read bandwidth
     5120 B/clk.
[H]  NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022) and CUDA C++ Programming Guide
     (compute capability 9.0 tables): 132 SMs (SXM5), 1980 MHz boost, 67 FP32 TFLOP/s, 989.4 dense
     FP16 and 989.4 dense BF16 tensor TFLOP/s (1978.9 with sparsity; SXM5), 256 KB L1/shared per SM,
     carve-outs 0/8/16/32/64/100/132/164/196/228 KB, 50 MB L2, 3.35 TB/s HBM3.
[H2] NVIDIA H200 datasheet (2024): same GH100 SM array as H100 SXM (132 SMs, 1980 MHz), 4.8 TB/s HBM3e;
     FP16 and BF16 tensor 1,979 TFLOP/s with sparsity, i.e. the H100 SXM's 989.4 dense.
     L2: 60 MB as 96 slices of 640 KB, 20-way: gpgpu-sim/gpgpu-sim_distribution
     configs/tested-cfgs/SM90_H200/gpgpusim.config (48 channels x 2 sub-partitions, S:256:128:20) and
     accel-sim/accel-sim-framework issue #534 (maintainer: "On H200: 12 MC, 2 LTC per MC, 4 LTS per
     LTC"); the full GH100 die has 60 MB (Chips and Cheese, "Nvidia's H100: Funny L2, and Tons of
     Bandwidth"). DESIGN section 6 lists 50 MB / 80 slices as a starting value; we follow the sources.
[P]  NVIDIA Tesla P100 whitepaper (WP-08019-001, 2016): 56 SMs, 1480 MHz boost, 10.6 FP32 TFLOP/s,
     21.2 FP16 TFLOP/s (half2 arithmetic on the CUDA cores: Pascal has no tensor cores), 64 KB shared
     memory per SM, 4 MB L2, 732 GB/s HBM2. L1/texture 24 KB per SM (CUDA C++ Programming Guide,
     compute capability 6.x: "24 KB (6.0 and 6.2) or 48 KB (6.1)").
[X]  NVIDIA TITAN Xp specifications (GP102): 30 SMs (3840 cores / 128), 1582 MHz boost, 12.1 FP32
     TFLOP/s (3840 x 2 x 1.582 GHz), 3 MB L2, 547.7 GB/s GDDR5X; 96 KB shared memory and 48 KB L1/texture
     per SM (CUDA C++ Programming Guide, compute capability 6.1).
[CC] CUDA C++ Programming Guide, "Technical Specifications per Compute Capability": 65,536 32-bit
     registers per SM; max 2,048 resident threads and 32 resident blocks per SM (6.x, 7.0, 8.0, 9.0).
[AS] Accel-Sim / GPGPU-Sim tested configs (slices = -gpgpu_n_mem x -gpgpu_n_sub_partition_per_mchannel,
     slice = -gpgpu_cache:dl2 sets x 128 B x ways): SM7_QV100 (accel-sim-framework
     gpu-simulator/gpgpu-sim/configs/tested-cfgs/SM7_QV100/gpgpusim.config): 32 x 2 = 64 slices, S:32:128:24
     = 96 KB 24-way; SM80_A100 (gpgpu-sim_distribution configs/tested-cfgs/SM80_A100): 40 x 4 = 160
     slices, S:128:128:16 = 256 KB 16-way (Accel-Sim's bandwidth-matching choice, accel-sim-framework
     #456; the whitepaper describes 80 x 512 KB); SM90_H100: 40 x 2 = 80 slices, S:256:128:20 = 640 KB
     20-way; SM6_TITANX: 12 x 2 = 24 slices, S:64:128:16 = 128 KB 16-way; 4.x-cfgs/SM6_P100: 32 x 1 = 32
     slices, S:64:128:16 = 128 KB 16-way. Those configs hash sets and partitions with IPOLY or XOR
     functions; DESIGN section 4's xor fold stands in for them.
[GS] GPGPU-Sim/Accel-Sim model the Volta-and-later L1 with 4 sets and (capacity / 512 B) ways,
     128-byte lines, 32-byte sectors; we use 4 sets on every GPU.
[JV] Jia et al., 2018 (Volta microbenchmarks): V100 L1 load throughput 128 B/clk/SM (theoretical),
     L2 load bandwidth 2,155 GB/s measured; P100 L2 1,624 GB/s.
[JT] L1/L2 throughput measurements, te42kyfo/gpu-benches (cuda-cache/*.txt, gpu-l2-cache/*.txt):
     A100: L1 19.1 TB/s over 108 SMs x 1.41 GHz = ~125 B/clk/SM; L2 4.4-5.4 TB/s measured of the
     whitepaper's 5120 B/clk [A]. H100 PCIe (114 SMs, 1.755 GHz): L1 ~126 B/clk/SM, L2 6.9-7.0 TB/s, which
     scaled by SMs x clock to the 132-SM 1.98 GHz SXM part gives ~9.1 TB/s; H200: L2 9.7-10.2 TB/s
     measured (gpu-l2-cache/h200.txt).
[HF] FP16 / BF16 arithmetic on the CUDA cores (SIMT kernels; half2 instructions): CUDA C++ Programming
     Guide, "Arithmetic Instructions" throughput table (16-bit floating-point add/multiply/multiply-add
     results per clock per SM against 32-bit: 2x on 6.0, 7.0 and 9.0, 4x on 8.0 for fp16 and 2x for bf16,
     1/64 on 6.1; no bf16 arithmetic before 8.0); A100 78 FP16 / 39 BF16 TFLOP/s (non-tensor) [A]; H100 SXM5
     133.8 FP16 and BF16 (non-tensor) [H]; V100 31.4 (2 x 15.7), P100 21.2 [P], TITAN Xp 12.1 / 64 = 0.19.
     Where the GPU has no 16-bit arithmetic (bf16 before Ampere) a SIMT kernel converts and computes in
     fp32: the fp32 peak.
[XL] TITAN Xp L2 bandwidth: no published measurement found; derived as 24 slices [AS] x 32 B/clk x
     1.582 GHz = 1.21 TB/s. Pascal L1: 64 B/clk/SM (Turing whitepaper: Turing's unified L1 doubles the
     hit bandwidth per TPC compared to Pascal).
"""
from __future__ import annotations

import dataclasses

from ._frozen import hash_once
from .config import CacheConfig, check_positive_int

KB = 1024
MB = 1024 * 1024
#: input dtypes of the tensor cores modelled (``GPU.tensor_dtypes``)
TENSOR_DTYPES = ("fp16", "bf16")


@hash_once
@dataclasses.dataclass(frozen=True)
class GPU:
    """One GPU's memory hierarchy and compute peaks (primary figures only).

    Parameters
    ----------
    name : str
    sms : int
        Streaming multiprocessors.
    clock_mhz : int
        Boost clock.
    fp32_tflops, tensor_tflops : float
        Peak FP32 SIMT and dense tensor-core throughput (TFLOP/s; 0: no tensor cores). Every GPU here
        runs each dtype of ``tensor_dtypes`` at that one peak; ask with ``tensor_tflops_for(dtype)``.
    fp16_tflops, bf16_tflops : float, optional
        Peak SIMT (CUDA-core) throughput with 16-bit inputs (TFLOP/s); None: ``fp32_tflops`` (no faster
        16-bit arithmetic). Ask with ``simt_tflops_for(dtype)``. Timing only: not part of simulation keys.
    tensor_dtypes : tuple of str, optional
        Input dtypes the tensor cores take, of ``TENSOR_DTYPES`` (``("fp16",)`` on Volta,
        ``("fp16", "bf16")`` from Ampere on). None (the default): ``("fp16",)`` if ``tensor_tflops``
        is positive, else ``()`` (GPU descriptions written before the field existed).
    l1_smem_bytes : int
        Unified L1 + shared memory per SM; or the L1 alone when ``smem_carveouts`` is empty.
    smem_carveouts : tuple of int
        Supported shared-memory carve-outs in bytes; empty: shared memory is separate
        (``separate_smem_bytes``) and the L1 is ``l1_smem_bytes`` whatever the kernel uses.
    separate_smem_bytes : int
        Shared memory per SM when it is separate from the L1 (Pascal); 0 otherwise.
    l1_sets : int
        Sets of each SM's L1 (ways follow from the capacity left to L1).
    l2_bytes, l2_slices, l2_ways : int
        L2 capacity, number of independent slices, associativity of a slice.
    l2_index : {"xor", "linear"}
        Slice selection and per-slice set index (DESIGN section 4).
    dram_gbps : float
        DRAM bandwidth (GB/s, 1e9 B/s).
    l1_bytes_per_clk : int
        L1 load bandwidth per SM per clock (timing model).
    l2_gbps : float
        L2 load bandwidth (timing model).
    max_ctas_per_sm, max_threads_per_sm, regs_per_sm : int
        Occupancy limits.
    line_bytes, sector_bytes : int
        Cache line and sector size of both levels.
    """

    name: str
    sms: int
    clock_mhz: int
    fp32_tflops: float
    l1_smem_bytes: int
    smem_carveouts: tuple
    l1_sets: int
    l2_bytes: int
    l2_slices: int
    l2_ways: int
    l2_index: str
    dram_gbps: float
    l1_bytes_per_clk: int
    l2_gbps: float
    tensor_tflops: float = 0.0
    tensor_dtypes: tuple = None
    fp16_tflops: float = None
    bf16_tflops: float = None
    separate_smem_bytes: int = 0
    max_ctas_per_sm: int = 32
    max_threads_per_sm: int = 2048
    regs_per_sm: int = 65536
    line_bytes: int = 128
    sector_bytes: int = 32

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"GPU.name must be a non-empty string, got {self.name!r}")
        for field in ("sms", "clock_mhz", "l1_smem_bytes", "l1_sets", "l2_bytes", "l2_slices", "l2_ways",
                      "l1_bytes_per_clk", "max_ctas_per_sm", "max_threads_per_sm", "regs_per_sm",
                      "line_bytes", "sector_bytes"):
            object.__setattr__(self, field, check_positive_int("GPU", field, getattr(self, field)))
        for field in ("fp32_tflops", "dram_gbps", "l2_gbps"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"GPU.{field} must be a positive number, got {value!r}")
        if isinstance(self.tensor_tflops, bool) or not isinstance(self.tensor_tflops, (int, float)) \
                or self.tensor_tflops < 0:
            raise ValueError(f"GPU.tensor_tflops must be a non-negative number, got {self.tensor_tflops!r}")
        for field in ("fp16_tflops", "bf16_tflops"):
            value = getattr(self, field)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not value > 0):
                raise ValueError(f"GPU.{field} must be a positive number or None, got {value!r}")
        dtypes = self.tensor_dtypes
        if dtypes is None:
            dtypes = ("fp16",) if self.tensor_tflops > 0 else ()
        if isinstance(dtypes, str) or not isinstance(dtypes, (tuple, list)) \
                or any(d not in TENSOR_DTYPES for d in dtypes) or len(set(dtypes)) != len(dtypes):
            raise ValueError(f"GPU.tensor_dtypes must be a tuple of distinct dtypes from {TENSOR_DTYPES}, "
                             f"got {self.tensor_dtypes!r}")
        object.__setattr__(self, "tensor_dtypes", tuple(dtypes))
        carveouts = tuple(self.smem_carveouts)
        for value in carveouts:
            if isinstance(value, bool) or not isinstance(value, int) or value < 0 or value > self.l1_smem_bytes:
                raise ValueError(f"GPU.smem_carveouts: each carve-out must be an integer in "
                                 f"[0, l1_smem_bytes={self.l1_smem_bytes}], got {value!r}")
        object.__setattr__(self, "smem_carveouts", tuple(sorted(carveouts)))
        if not carveouts and self.separate_smem_bytes <= 0:
            raise ValueError("GPU.separate_smem_bytes must be positive when smem_carveouts is empty "
                             "(shared memory separate from L1)")
        if self.l2_index not in ("xor", "linear"):
            raise ValueError(f"GPU.l2_index must be 'xor' or 'linear', got {self.l2_index!r}")
        if self.l2_bytes % self.l2_slices:
            raise ValueError(f"GPU.l2_bytes={self.l2_bytes} is not a multiple of l2_slices={self.l2_slices}")
        # Building the slice config checks size vs line*ways and the xor power-of-two rule.
        try:
            self.l2_slice_config()
        except ValueError as err:
            raise ValueError(f"GPU {self.name!r}: L2 slice geometry invalid: {err}") from None

    # ---- derived figures -------------------------------------------------------------------
    @property
    def l2_slice_bytes(self) -> int:
        return self.l2_bytes // self.l2_slices

    @property
    def l2_sets_per_slice(self) -> int:
        return self.l2_slice_bytes // (self.line_bytes * self.l2_ways)

    @property
    def max_smem_per_sm(self) -> int:
        return self.smem_carveouts[-1] if self.smem_carveouts else self.separate_smem_bytes

    @property
    def l1_gbps(self) -> float:
        """Aggregate L1 load bandwidth of all SMs (GB/s)."""
        return self.l1_bytes_per_clk * self.sms * self.clock_mhz * 1e6 / 1e9

    @property
    def peak_flops(self) -> float:
        """FP32 SIMT peak in FLOP/s."""
        return self.fp32_tflops * 1e12

    def simt_tflops_for(self, dtype: str) -> float:
        """Peak SIMT (CUDA-core) throughput (TFLOP/s) with inputs of ``dtype`` ("fp32", "fp16", "bf16")."""
        if dtype not in ("fp32",) + TENSOR_DTYPES:
            raise ValueError(f"dtype must be one of fp32, {', '.join(TENSOR_DTYPES)}, got {dtype!r}")
        rate = None if dtype == "fp32" else getattr(self, f"{dtype}_tflops")
        return float(self.fp32_tflops if rate is None else rate)

    def tensor_tflops_for(self, dtype: str) -> float:
        """Dense tensor-core peak (TFLOP/s) for inputs of ``dtype`` ("fp16" or "bf16").

        Raises
        ------
        ValueError
            ``dtype`` is not a tensor-core dtype, or this GPU's tensor cores do not take it (one line
            naming both, e.g. "bf16 tensor cores not available on v100 (tensor dtypes: fp16)").
        """
        if dtype not in TENSOR_DTYPES:
            raise ValueError(f"tensor-core dtype must be one of {', '.join(TENSOR_DTYPES)}, got {dtype!r}")
        if dtype not in self.tensor_dtypes or not self.tensor_tflops > 0:
            have = ", ".join(self.tensor_dtypes) if self.tensor_tflops > 0 and self.tensor_dtypes else "none"
            raise ValueError(f"{dtype} tensor cores not available on {self.name} (tensor dtypes: {have})")
        return float(self.tensor_tflops)

    def occupancy(self, smem_per_cta: int, threads_per_cta: int, regs_per_thread: int) -> int:
        """CTAs resident per SM: the least of the shared-memory, register, thread and CTA limits."""
        smem_per_cta = int(smem_per_cta)
        limits = [self.max_ctas_per_sm,
                  self.max_threads_per_sm // threads_per_cta,
                  self.regs_per_sm // (regs_per_thread * threads_per_cta)]
        if smem_per_cta > 0:
            limits.append(self.max_smem_per_sm // smem_per_cta)
        ctas = min(limits)
        if ctas < 1:
            raise ValueError(
                f"kernel does not fit on {self.name}: smem {smem_per_cta} B/CTA (max {self.max_smem_per_sm}), "
                f"{threads_per_cta} threads (max {self.max_threads_per_sm}), "
                f"{regs_per_thread * threads_per_cta} registers (max {self.regs_per_sm})")
        return ctas

    def carveout_for(self, smem_bytes: int) -> int:
        """Smallest supported shared-memory carve-out that holds ``smem_bytes`` (0 if separate)."""
        if not self.smem_carveouts:
            if smem_bytes > self.separate_smem_bytes:
                raise ValueError(f"{self.name}: {smem_bytes} B of shared memory per SM exceeds "
                                 f"{self.separate_smem_bytes} B")
            return 0
        for carveout in self.smem_carveouts:
            if carveout >= smem_bytes:
                return carveout
        raise ValueError(f"{self.name}: {smem_bytes} B of shared memory per SM exceeds the largest "
                         f"carve-out {self.smem_carveouts[-1]} B")

    def l1_bytes(self, ctas_per_sm: int, smem_per_cta: int) -> int:
        """L1 capacity left after the carve-out that fits ``ctas_per_sm`` CTAs' shared memory."""
        if not self.smem_carveouts:
            return self.l1_smem_bytes
        left = self.l1_smem_bytes - self.carveout_for(ctas_per_sm * smem_per_cta)
        if left <= 0:
            raise ValueError(f"{self.name}: no L1 left after a {ctas_per_sm * smem_per_cta} B carve-out")
        return left

    def l1_ways(self, ctas_per_sm: int, smem_per_cta: int) -> int:
        return self.l1_bytes(ctas_per_sm, smem_per_cta) // (self.l1_sets * self.line_bytes)

    def l1_config(self, ctas_per_sm: int, smem_per_cta: int) -> CacheConfig:
        """Geometry of one SM's L1 for a kernel (linear index, ``l1_sets`` sets)."""
        size = self.l1_bytes(ctas_per_sm, smem_per_cta)
        unit = self.l1_sets * self.line_bytes
        if size % unit:
            raise ValueError(f"{self.name}: L1 of {size} B is not a multiple of l1_sets * line_bytes = {unit}")
        return CacheConfig(size, size // unit, self.line_bytes, self.sector_bytes, "linear")

    def l2_slice_config(self) -> CacheConfig:
        """Geometry of one L2 slice."""
        return CacheConfig(self.l2_bytes // self.l2_slices, self.l2_ways, self.line_bytes,
                           self.sector_bytes, self.l2_index)


_CARVEOUTS_V100 = tuple(x * KB for x in (0, 8, 16, 32, 64, 96))                       # [V]
_CARVEOUTS_A100 = tuple(x * KB for x in (0, 8, 16, 32, 64, 100, 132, 164))            # [A]
_CARVEOUTS_H100 = tuple(x * KB for x in (0, 8, 16, 32, 64, 100, 132, 164, 196, 228))  # [H]

GPUS = {
    "titanxp": GPU(name="titanxp", sms=30, clock_mhz=1582, fp32_tflops=12.1,                    # [X]
                   l1_smem_bytes=48 * KB, smem_carveouts=(), separate_smem_bytes=96 * KB,       # [X]
                   l1_sets=4,                                                                  # [GS]
                   l2_bytes=3 * MB, l2_slices=24, l2_ways=16, l2_index="xor",                  # [X][AS]
                   dram_gbps=547.7, l1_bytes_per_clk=64, l2_gbps=1200.0,                       # [X][XL]
                   tensor_tflops=0.0, tensor_dtypes=(), fp16_tflops=12.1 / 64),                # [X][HF]
    "p100": GPU(name="p100", sms=56, clock_mhz=1480, fp32_tflops=10.6,                          # [P]
                l1_smem_bytes=24 * KB, smem_carveouts=(), separate_smem_bytes=64 * KB,          # [P]
                l1_sets=4,                                                                     # [GS]
                l2_bytes=4 * MB, l2_slices=32, l2_ways=16, l2_index="xor",                     # [P][AS]
                dram_gbps=732.0, l1_bytes_per_clk=64, l2_gbps=1624.0,                          # [P][JV][XL]
                tensor_tflops=0.0, tensor_dtypes=(), fp16_tflops=21.2),                        # [P][HF]
    "v100": GPU(name="v100", sms=80, clock_mhz=1530, fp32_tflops=15.7,                          # [V]
                l1_smem_bytes=128 * KB, smem_carveouts=_CARVEOUTS_V100, l1_sets=4,              # [V][GS]
                l2_bytes=6 * MB, l2_slices=64, l2_ways=24, l2_index="xor",                     # [V][AS]
                dram_gbps=900.0, l1_bytes_per_clk=128, l2_gbps=2155.0,                         # [V][JV]
                tensor_tflops=125.0, tensor_dtypes=("fp16",), fp16_tflops=31.4),               # [V][HF]
    "a100": GPU(name="a100", sms=108, clock_mhz=1410, fp32_tflops=19.5,                         # [A]
                l1_smem_bytes=192 * KB, smem_carveouts=_CARVEOUTS_A100, l1_sets=4,              # [A][GS]
                l2_bytes=40 * MB, l2_slices=160, l2_ways=16, l2_index="xor",                   # [A][AS]
                dram_gbps=1555.0, l1_bytes_per_clk=128, l2_gbps=4800.0,                        # [A][JT]
                tensor_tflops=312.0, tensor_dtypes=("fp16", "bf16"),                           # [A]
                fp16_tflops=78.0, bf16_tflops=39.0),                                           # [A][HF]
    "h100": GPU(name="h100", sms=132, clock_mhz=1980, fp32_tflops=67.0,                         # [H]
                l1_smem_bytes=256 * KB, smem_carveouts=_CARVEOUTS_H100, l1_sets=4,              # [H][GS]
                l2_bytes=50 * MB, l2_slices=80, l2_ways=20, l2_index="xor",                    # [H][AS]
                dram_gbps=3350.0, l1_bytes_per_clk=128, l2_gbps=9100.0,                        # [H][JT]
                tensor_tflops=989.4, tensor_dtypes=("fp16", "bf16"),                           # [H]
                fp16_tflops=133.8, bf16_tflops=133.8),                                         # [H][HF]
    "h200": GPU(name="h200", sms=132, clock_mhz=1980, fp32_tflops=67.0,                         # [H2]
                l1_smem_bytes=256 * KB, smem_carveouts=_CARVEOUTS_H100, l1_sets=4,              # [H2][GS]
                l2_bytes=60 * MB, l2_slices=96, l2_ways=20, l2_index="xor",                    # [H2]
                dram_gbps=4800.0, l1_bytes_per_clk=128, l2_gbps=9700.0,                        # [H2][JT]
                tensor_tflops=989.4, tensor_dtypes=("fp16", "bf16"),                           # [H2]
                fp16_tflops=133.8, bf16_tflops=133.8),                                         # [H2][HF]
}


def gpu(name: str) -> GPU:
    """Return the GPU description called ``name`` (case-insensitive); lists the known names if unknown."""
    if not isinstance(name, str):
        raise TypeError(f"gpu name must be a string, got {name!r}")
    key = name.strip().lower()
    if key not in GPUS:
        raise ValueError(f"unknown GPU {name!r}; known GPUs: {', '.join(GPUS)}")
    return GPUS[key]
