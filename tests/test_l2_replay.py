"""`validation.l2_replay`: the plain-Python replay of every L1 and the L2 gives the simulator's L2 read sectors,
their misses (the DRAM reads) and the DRAM writes exactly (an independent LRU over the same stream, DESIGN
section 4's slice and set functions); its classes partition the reads; the CLI checks its input."""
import json

import pytest

import simcore
import traces
from simcore import metrics as M
from validation import l2_replay
from validation.l2_replay import replay_l2

CASES = [
    # dense 3x3 on a titanxp with a small L2 (24 slices, xor-folded), tiles re-read by later waves
    (traces.ConvLayer(n=2, c=32, h=14, w=14, k=64, r=3, s=3, pad=(1, 1), name="dense"),
     traces.KernelConfig(tile_m=32, tile_n=32, tile_k=8, threads=64), "titanxp", dict(sms=4, l2_bytes=64 * 1024)),
    # depthwise on a v100 (linear slices) with its L2 cut to a quarter of a MB
    (traces.ConvLayer(n=1, c=64, h=10, w=10, k=64, r=3, s=3, pad=(1, 1), groups=64, name="dw"),
     traces.KernelConfig(tile_m=64, tile_n=64, tile_k=32, threads=128), "v100", dict(sms=3, l2_bytes=4 * 1024)),
    # tensor-op: B by cp.async.cg (bypasses the L1), stores evicted dirty
    (traces.ConvLayer(n=2, c=64, h=12, w=12, k=128, r=3, s=3, pad=(1, 1), name="tc"),
     traces.KernelConfig(tile_m=64, tile_n=64, tile_k=32, threads=64, dtype="fp16", math="tensorop", vector=8,
                         stages=3), "a100",
     dict(sms=2, l2_bytes=10 * 1024)),
]


@pytest.mark.parametrize("layer, kernel, gpu_name, change", CASES)
def test_replay_is_the_simulation(layer, kernel, gpu_name, change):
    gpu = simcore.replace_gpu(simcore.gpu(gpu_name), **change)
    sim = traces.simulate_layer(layer, gpu, kernel)
    result = replay_l2(layer, gpu, kernel)
    for op in "AB":
        table = result["classes"][op]
        reads = sum(e["reads"] for e in table.values())
        misses = sum(e["misses"] for e in table.values())
        assert all(0 <= e["misses"] <= e["reads"] and e["line_present"] <= e["reads"] for e in table.values())
        assert table.get("first", {"misses": 0})["misses"] == table.get("first", {"reads": 0})["reads"]
        assert reads == sim[f"{M.L2_RD_SECTORS}:{op}"]
        assert misses == sim[f"{M.DRAM_RD_SECTORS}:{op}"]
    assert result["dram_writes"] == sim[M.DRAM_WR_SECTORS]
    # the L2s are small enough that some re-reads miss too
    assert sim[M.DRAM_RD_SECTORS] > sum(result["classes"][op].get("first", {"reads": 0})["reads"] for op in "AB")


def test_replay_rejects_bad_input():
    layer, kernel, gpu_name, _ = CASES[0]
    with pytest.raises(TypeError, match="layer must be"):
        replay_l2("vgg16", simcore.gpu(gpu_name), kernel)


def test_cli(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert l2_replay.main(["--random-case", "4:265", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "| A | first |" in text and "miss (DRAM reads)" in text
    doc = json.loads(out.read_text())
    assert doc["format"] == "deltasim-l2-replay" and doc["case"] == "4:265"
    assert set(doc["classes"]) == {"A", "B"}


@pytest.mark.parametrize("argv", [["--random-case", "4"], ["--random-case", "a:b"], ["--random-case", "-1:2"], []])
def test_cli_bad_input(argv, capsys):
    assert l2_replay.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")
