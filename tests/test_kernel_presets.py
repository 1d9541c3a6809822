"""Named kernels (traces.KERNELS) and ``--kernel NAME`` on the CLIs: the preset is the base, options given
override it, an unknown name is one error line (exit 2); tensor-op trace files keep their request kinds."""
from __future__ import annotations

import dataclasses

import pytest

from simcore.gpus import gpu
from traces import KERNELS, ConvLayer, KernelConfig, iter_request_chunks, kernel_from_options, simulate_layer
from traces.tracefile import read_trace, replay, write_trace


def test_presets():
    assert KERNELS["simt_128x128x8"] == KernelConfig()
    for name, kernel in KERNELS.items():
        assert (kernel.math == "tensorop") == name.startswith("sm80_tensorop")
    k = KERNELS["sm80_tensorop_128x128x32_128t"]
    assert (k.tile_m, k.tile_n, k.tile_k, k.threads, k.stages, k.dtype) == (128, 128, 32, 128, 3, "fp16")
    assert KERNELS["sm80_tensorop_128x128x32_256t"].threads == 256
    assert (KERNELS["sm80_tensorop_256x128x32"].tile_m, KERNELS["sm80_tensorop_256x128x32"].threads) == (256, 256)
    # 48 KB of shared memory: 3 CTAs on a100 by shared memory (164 KB carve-out), registers allow 2
    assert k.smem_per_cta == 48 * 1024 and k.resident_ctas(gpu("a100")) == 2


def test_options_override_preset():
    k = kernel_from_options("sm80_tensorop_128x128x32_128t", tile="64x64x32", dtype="bf16", threads=None)
    assert (k.tile_m, k.tile_n, k.tile_k, k.dtype, k.threads, k.math) == (64, 64, 32, "bf16", 128, "tensorop")
    assert kernel_from_options(None) == KernelConfig()
    assert kernel_from_options(None, tile="64x32x8", threads=64) == KernelConfig(tile_m=64, tile_n=32, threads=64)


@pytest.mark.parametrize("bad, match", [(dict(preset="nope"), "unknown kernel 'nope' \\(known: simt_128x128x8, "),
                                        (dict(preset="sm80_tensorop_256x128x32", tile="128x128"),
                                         "tile must look like"),
                                        (dict(preset="sm80_tensorop_256x128x32", threads=96),
                                         "warp-raked map cannot tile")])
def test_bad_options(bad, match):
    with pytest.raises(ValueError, match=match):
        kernel_from_options(**bad)


def _error_line(capsys):
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    return err


@pytest.mark.parametrize("module", ["validation.compare", "validation.accuracy", "analytic.roofline",
                                    "analytic.scaling", "traces.dump"])
def test_cli_unknown_kernel(module, capsys, tmp_path):
    import importlib
    main = importlib.import_module(module).main
    argv = ["vgg16", "--kernel", "nope"]
    if module == "traces.dump":
        argv += ["--layer", "conv1_1", "-o", str(tmp_path / "t.h5")]
    if module == "analytic.scaling":
        argv += ["--scale", "sms=2"]
    assert main(argv) == 2
    err = _error_line(capsys)
    assert "unknown kernel 'nope'" in err and "sm80_tensorop_128x128x32_128t" in err
    assert not list(tmp_path.iterdir())


def test_cli_kernel_option(capsys):
    from analytic import _cli
    from validation import common
    parser = common.ArgumentParser()
    common.add_kernel_arguments(parser)
    args = parser.parse_args(["--kernel", "sm80_tensorop_128x128x32_256t", "--dtype", "bf16"])
    assert common.kernel_from_args(args) == dataclasses.replace(KERNELS["sm80_tensorop_128x128x32_256t"],
                                                                dtype="bf16")
    parser = _cli.Parser()
    _cli.add_kernel_arguments(parser)
    args = parser.parse_args(["--kernel", "sm80_tensorop_256x128x32", "--tile", "128x128x32"])
    assert _cli.resolve_kernel(args) == dataclasses.replace(KERNELS["sm80_tensorop_256x128x32"], tile_m=128)


def test_roofline_tensorop_bf16_on_v100_is_one_line(capsys):
    from analytic import roofline
    assert roofline.main(["vgg16", "--gpu", "v100", "--kernel", "sm80_tensorop_128x128x32_128t",
                          "--dtype", "bf16"]) == 2
    assert "bf16 tensor cores not available on v100" in _error_line(capsys)


def test_trace_file_keeps_kinds(tmp_path):
    layer = ConvLayer(1, 12, 6, 6, 24, 3, 3, pad=1)
    g = dataclasses.replace(gpu("a100"), sms=3)
    kernel = kernel_from_options("sm80_tensorop_128x128x32_128t", tile="32x32x32", threads=32)
    trace = write_trace(tmp_path / "t.h5", iter_request_chunks(layer, g, kernel), layer, kernel, g)
    assert read_trace(trace.path).kernel == kernel
    assert set(trace.load().kind.tolist()) == {1, 3}           # C = 12: B through the L1 (.ca)
    assert replay(trace) == simulate_layer(layer, g, kernel)
