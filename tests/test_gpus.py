"""simcore.gpus: the GPU table, derived figures, hypothetical GPUs, bad input."""
import dataclasses
import json

import pytest

from simcore import GPU, GPUS, CacheConfig, gpu

KB, MB = 1024, 1024 * 1024


@pytest.mark.parametrize("name", sorted(GPUS))
def test_every_gpu_constructs_and_is_consistent(name):
    g = gpu(name)
    assert isinstance(g, GPU) and g.name == name
    assert gpu(name.upper()) is g
    slice_config = g.l2_slice_config()
    assert isinstance(slice_config, CacheConfig)
    assert slice_config.size_bytes * g.l2_slices == g.l2_bytes
    assert g.l2_sets_per_slice * g.l2_ways * g.line_bytes == g.l2_slice_bytes
    assert slice_config.sets == g.l2_sets_per_slice
    ctas = g.occupancy(16384, 256, 128)   # the default 128x128x8 fp32 kernel
    assert ctas >= 1
    l1 = g.l1_config(ctas, 16384)
    assert l1.sets == g.l1_sets and l1.ways == g.l1_ways(ctas, 16384)
    assert g.peak_flops > 0 and g.l1_gbps > 0 and g.dram_gbps > 0


def test_v100_default_kernel_figures():
    v100 = gpu("v100")
    # smem per CTA = stages 2 * (128 + 128) * 8 * 4 B = 16 KB; limits: smem 96 KB / 16 KB = 6,
    # threads 2048 / 256 = 8, registers 65536 / (128 * 256) = 2, CTAs 32  ->  2 CTAs per SM.
    assert v100.occupancy(16384, 256, 128) == 2
    # 2 CTAs need 32 KB of shared memory: carve-out 32 KB, L1 = 128 - 32 = 96 KB,
    # 4 sets of 128 B lines -> 96 KB / 512 B = 192 ways.
    assert v100.carveout_for(2 * 16384) == 32 * KB
    assert v100.l1_bytes(2, 16384) == 96 * KB
    assert v100.l1_config(2, 16384) == CacheConfig(96 * KB, 192, 128, 32, "linear")
    # L2: 6 MB / 64 slices = 96 KB per slice; 96 KB / (24 ways * 128 B) = 32 sets per slice.
    assert v100.l2_slice_bytes == 96 * KB
    assert v100.l2_sets_per_slice == 32
    assert v100.l2_slice_config() == CacheConfig(96 * KB, 24, 128, 32, "xor")


def test_pascal_l1_is_independent_of_shared_memory():
    p100 = gpu("p100")
    assert p100.smem_carveouts == ()
    assert p100.l1_bytes(1, 48 * KB) == p100.l1_bytes(4, 8 * KB) == 24 * KB
    assert p100.carveout_for(64 * KB) == 0
    with pytest.raises(ValueError, match="exceeds"):
        p100.carveout_for(65 * KB)


def test_replace_gives_consistent_derived_figures():
    v100 = gpu("v100")
    big = dataclasses.replace(v100, sms=160, l2_bytes=12 * MB)
    assert big.sms == 160 and big.name == "v100"
    assert big.l2_slice_bytes == 192 * KB            # 12 MB / 64 slices
    assert big.l2_sets_per_slice == 64               # 192 KB / (24 * 128 B)
    assert big.l2_slice_config().sets == 64
    assert big.l1_gbps == 2 * v100.l1_gbps
    more_smem = dataclasses.replace(v100, l1_smem_bytes=256 * KB)
    assert more_smem.l1_bytes(2, 16384) == 224 * KB and more_smem.l1_ways(2, 16384) == 448
    fewer_regs = dataclasses.replace(v100, regs_per_sm=32768)
    assert fewer_regs.occupancy(16384, 256, 128) == 1


def test_unknown_gpu_lists_the_known_ones():
    with pytest.raises(ValueError) as err:
        gpu("rtx9090")
    for name in GPUS:
        assert name in str(err.value)
    with pytest.raises(TypeError):
        gpu(100)


@pytest.mark.parametrize("field, value, error, match", [
    ("sms", 0, ValueError, "GPU.sms"),
    ("sms", 1.5, TypeError, "GPU.sms"),
    ("l2_bytes", -1, ValueError, "GPU.l2_bytes"),
    ("l2_slices", 7, ValueError, "l2_slices"),                 # 6 MB not a multiple of 7
    ("l2_ways", 5, ValueError, "L2 slice geometry"),           # 96 KB not a multiple of 5 * 128
    ("l2_ways", 16, ValueError, "power-of-two"),               # 48 sets with the xor index
    ("l2_index", "hash", ValueError, "l2_index"),
    ("dram_gbps", 0, ValueError, "dram_gbps"),
    ("fp32_tflops", "fast", ValueError, "fp32_tflops"),
    ("smem_carveouts", (0, 200 * KB), ValueError, "smem_carveouts"),
    ("name", "", TypeError, "name"),
])
def test_bad_gpu_fields(field, value, error, match):
    with pytest.raises(error, match=match):
        dataclasses.replace(gpu("v100"), **{field: value})


def test_kernel_that_does_not_fit():
    v100 = gpu("v100")
    with pytest.raises(ValueError, match="does not fit"):
        v100.occupancy(200 * KB, 256, 128)
    with pytest.raises(ValueError, match="carve-out"):
        v100.l1_bytes(8, 16384)                          # 128 KB of shared memory > 96 KB


# ---- tensor-core peaks -------------------------------------------------------------------------

@pytest.mark.parametrize("name, peak, dtypes", [
    ("titanxp", 0.0, ()), ("p100", 0.0, ()),                    # Pascal: no tensor cores
    ("v100", 125.0, ("fp16",)),                                  # Volta: FP16 inputs only
    ("a100", 312.0, ("fp16", "bf16")), ("h100", 989.4, ("fp16", "bf16")), ("h200", 989.4, ("fp16", "bf16")),
])
def test_tensor_core_peaks_from_the_whitepapers(name, peak, dtypes):
    g = gpu(name)
    assert g.tensor_tflops == peak and g.tensor_dtypes == dtypes
    for dtype in dtypes:
        assert g.tensor_tflops_for(dtype) == peak
    for dtype in set(("fp16", "bf16")) - set(dtypes):
        with pytest.raises(ValueError, match=f"^{dtype} tensor cores not available on {name} "):
            g.tensor_tflops_for(dtype)


def test_bf16_on_v100_is_one_clear_line():
    with pytest.raises(ValueError) as err:
        gpu("v100").tensor_tflops_for("bf16")
    assert str(err.value) == "bf16 tensor cores not available on v100 (tensor dtypes: fp16)"
    with pytest.raises(ValueError, match="not available on p100 \\(tensor dtypes: none\\)"):
        gpu("p100").tensor_tflops_for("fp16")


@pytest.mark.parametrize("dtype", ["fp32", "tf32", "FP16", None])
def test_tensor_tflops_for_rejects_unknown_dtypes(dtype):
    with pytest.raises(ValueError, match="tensor-core dtype must be one of fp16, bf16"):
        gpu("a100").tensor_tflops_for(dtype)


def test_hypothetical_gpus_keep_their_tensor_dtypes_and_peak():
    a100 = gpu("a100")
    no_tensor = dataclasses.replace(a100, tensor_tflops=0.0)
    with pytest.raises(ValueError, match="fp16 tensor cores not available on a100 \\(tensor dtypes: none\\)"):
        no_tensor.tensor_tflops_for("fp16")
    v100_bf16 = dataclasses.replace(gpu("v100"), tensor_dtypes=["fp16", "bf16"])   # a list is accepted
    assert v100_bf16.tensor_dtypes == ("fp16", "bf16") and v100_bf16.tensor_tflops_for("bf16") == 125.0


@pytest.mark.parametrize("value", [("fp8",), "fp16", ("fp16", "fp16"), 16])
def test_bad_tensor_dtypes(value):
    with pytest.raises(ValueError, match="GPU.tensor_dtypes"):
        dataclasses.replace(gpu("a100"), tensor_dtypes=value)


def test_descriptions_without_tensor_dtypes_still_load():
    # a GPU written (e.g. into a results or trace file) before tensor_dtypes existed: FP16 if it had a
    # tensor peak, none otherwise; and a description written now reads back equal through JSON
    old = dataclasses.asdict(gpu("v100"))
    del old["tensor_dtypes"]
    assert GPU(**old).tensor_dtypes == ("fp16",)
    old.update(name="pascal", tensor_tflops=0.0)
    assert GPU(**old).tensor_dtypes == ()
    new = json.loads(json.dumps(dataclasses.asdict(gpu("h100"))))
    new["smem_carveouts"] = tuple(new["smem_carveouts"])
    assert GPU(**new) == gpu("h100")
