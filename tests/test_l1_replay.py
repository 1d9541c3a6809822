"""`validation.l1_replay`: the plain-Python replay of one SM's L1, summed over every SM, gives the simulator's
L1 load hits and sectors exactly (an independent LRU over the same stream); its classes partition the reads;
the CLI checks its input."""
import json

import pytest

import simcore
import traces
from simcore import metrics as M
from validation import l1_replay
from validation.l1_replay import replay_l1

CASES = [
    # dense 3x3, two CTAs an SM, partial tiles
    (traces.ConvLayer(n=1, c=16, h=12, w=12, k=32, r=3, s=3, pad=(1, 1), name="dense"),
     traces.KernelConfig(tile_m=32, tile_n=32, tile_k=8, threads=64), "v100", 4),
    # depthwise 3x3 (kMultipleGroup), pixels of 1,024 bytes
    (traces.ConvLayer(n=1, c=256, h=8, w=8, k=256, r=3, s=3, pad=(1, 1), groups=256, name="dw"),
     traces.KernelConfig(tile_m=64, tile_n=128, tile_k=32, threads=256), "a100", 3),
]


@pytest.mark.parametrize("layer, kernel, gpu_name, sms", CASES)
def test_replay_over_every_sm_is_the_simulation(layer, kernel, gpu_name, sms):
    gpu = simcore.replace_gpu(simcore.gpu(gpu_name), sms=sms)
    sim = traces.simulate_layer(layer, gpu, kernel)
    for op in "AB":
        hits = reads = 0
        for sm in range(gpu.sms):
            table = replay_l1(layer, gpu, kernel, sm)["classes"][op]
            hits += sum(e["hits"] for e in table.values())
            reads += sum(e["reads"] for e in table.values())
            assert all(0 <= e["hits"] <= e["line_present"] <= e["reads"] for e in table.values())
        assert reads == sim[f"{M.L1_LD_SECTORS}:{op}"]
        assert hits == sim[f"{M.L1_LD_HITS}:{op}"]


def test_grouped_classes_and_first_reads():
    layer, kernel, gpu_name, sms = CASES[1]
    gpu = simcore.replace_gpu(simcore.gpu(gpu_name), sms=sms)
    table = replay_l1(layer, gpu, kernel, 0)["classes"]["A"]
    assert set(table) <= {"first", "other CTA", "same CTA, same group", "same CTA, later group"}
    assert table["first"]["hits"] == 0
    assert table["same CTA, later group"]["reads"] > 0      # the next group re-reads the pixel's sectors


def test_replay_rejects_bad_input():
    layer, kernel, gpu_name, _ = CASES[0]
    gpu = simcore.gpu(gpu_name)
    with pytest.raises(ValueError, match="sm must be"):
        replay_l1(layer, gpu, kernel, gpu.sms)
    with pytest.raises(TypeError, match="layer must be"):
        replay_l1("vgg16", gpu, kernel)


def test_cli(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert l1_replay.main(["--random-case", "4:52", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "same CTA, later group" in text
    doc = json.loads(out.read_text())
    assert doc["format"] == "deltasim-l1-replay" and doc["classes"]["A"]["first"]["hits"] == 0
    assert l1_replay.main(["--random-case", "4"]) == 2
    assert l1_replay.main(["--random-case", "1:0", "--sm", "100000"]) == 2
    bad = tmp_path / "none" / "r.json"
    assert l1_replay.main(["--random-case", "1:0", "--json", str(bad)]) == 2
    assert not bad.exists()
    assert "SEED:INDEX" in capsys.readouterr().err
