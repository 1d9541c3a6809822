"""simcore.replace_gpu / scale_gpu: any L2 size, slice count, SM count or L1 size gives a consistent GPU."""
import dataclasses

import pytest
from hypothesis import given, settings, strategies as st

import simcore
import traces
from simcore import describe_l2, replace_gpu, scale_gpu

STOCK = list(simcore.GPUS)


@pytest.mark.parametrize("name", STOCK)
@pytest.mark.parametrize("factor", [0.25, 0.5, 0.75, 1.5, 2, 3, 4])
def test_any_l2_factor_gives_a_valid_geometry(name, factor):
    base = simcore.gpu(name)
    new = scale_gpu(base, {"l2_bytes": factor})
    assert new.l2_slices == base.l2_slices and new.l2_sets_per_slice == base.l2_sets_per_slice
    assert new.l2_ways * new.l2_sets_per_slice * new.l2_slices * new.line_bytes == new.l2_bytes
    # within one way per slice of the request
    assert abs(new.l2_bytes - base.l2_bytes * factor) <= base.l2_slices * base.l2_sets_per_slice * base.line_bytes
    new.l2_slice_config()                       # the xor index needs a power-of-two set count: no error


@given(st.sampled_from(STOCK), st.floats(0.05, 8.0), st.sampled_from([None, 0.5, 2.0, 1.5]))
@settings(max_examples=200)
def test_l2_bytes_and_slices_together(name, factor, slices):
    base = simcore.gpu(name)
    factors = {"l2_bytes": factor} if slices is None else {"l2_bytes": factor, "l2_slices": slices}
    new = scale_gpu(base, factors)
    cfg = new.l2_slice_config()
    assert cfg.sets * cfg.ways * cfg.line_bytes == new.l2_bytes // new.l2_slices
    assert cfg.sets & (cfg.sets - 1) == 0
    assert new.l2_ways >= 1


def test_explicit_ways_must_fit():
    v100 = simcore.gpu("v100")
    assert replace_gpu(v100, l2_bytes=12 << 20, l2_ways=48).l2_sets_per_slice == 32
    with pytest.raises(ValueError, match="l2_ways"):
        replace_gpu(v100, l2_bytes=9 << 20, l2_ways=25)


def test_sms_and_clock_scale_the_peaks_l1_drops_carveouts():
    v100 = simcore.gpu("v100")
    two = scale_gpu(v100, {"sms": 2})
    assert two.sms == 160 and two.fp32_tflops == pytest.approx(2 * v100.fp32_tflops)
    assert two.tensor_tflops == pytest.approx(2 * v100.tensor_tflops)
    half_l1 = scale_gpu(v100, {"l1_smem_bytes": 0.5})
    assert half_l1.l1_smem_bytes == 64 * 1024 and max(half_l1.smem_carveouts) <= half_l1.l1_smem_bytes
    assert replace_gpu(v100, sms=40, fp32_tflops=1.0).fp32_tflops == 1.0       # given peaks are kept


@pytest.mark.parametrize("factors, word", [({"bogus": 2}, "bogus"), ({"name": 2}, "name"),
                                           ({"sms": 0}, "sms"), ({"sms": -1}, "sms"), ({"sms": "x"}, "sms"),
                                           ({"sms": 0.001}, "sms")])
def test_bad_factors_name_the_field(factors, word):
    with pytest.raises((ValueError, TypeError), match=word):
        scale_gpu(simcore.gpu("v100"), factors)


def test_simulator_and_model_use_the_same_geometry():
    """A layer whose footprint fits 1.5x the v100 L2 but not the v100's: the simulated DRAM reads
    fall to compulsory on the scaled GPU, and so do the predicted ones."""
    layer = traces.ConvLayer(4, 64, 56, 56, 64, 3, 3, pad=1)
    kernel = traces.KernelConfig()
    big = scale_gpu(simcore.gpu("v100"), {"l2_bytes": 1.5})
    assert big.l2_bytes == 9 << 20 and "36 ways" in describe_l2(big)
    import analytic
    sim = traces.simulate_layer(layer, big, kernel)
    pred = analytic.predict_layer(layer, big, kernel)
    key = simcore.metrics.DRAM_RD_SECTORS
    assert abs(pred[key] - sim[key]) / sim[key] < 0.05
    assert dataclasses.asdict(big)["l2_ways"] == 36
