"""Training steps (issue 14): analytic.predict_step / step_total, and --op train on the CLIs."""
from __future__ import annotations

import json
import math

import pytest

import analytic
import simcore
from analytic import roofline, scaling
from analytic.training import pass_kernels, step_time, step_total
from simcore import metrics as M
from traces import ConvLayer, KernelConfig
from validation import accuracy, compare, results

from .test_validation import FakeFactors, _fake_metrics, _stderr_line

OP_SCALE = {"fprop": 1, "dgrad": 2, "wgrad": 3}
OP_SECONDS = {"fprop": 1e-6, "dgrad": 2e-6, "wgrad": 4e-6}      # wgrad dram-bound, the others compute
COUNT_KEYS = (M.L1_LD_REQUESTS, M.L1_LD_SECTORS, M.L2_RD_SECTORS, M.DRAM_RD_SECTORS, M.DRAM_WR_SECTORS)


def _tiny_layers():
    return [ConvLayer(1, 16, 10, 10, 32, 3, 3, pad=1, name="a"),
            ConvLayer(2, 32, 9, 9, 16, 3, 3, stride=2, pad=1, name="b"),
            ConvLayer(1, 24, 7, 7, 40, 1, 1, name="c")]


# ---- step_total ----------------------------------------------------------------------------------
def test_step_total_on_hand_made_passes():
    passes = {
        "fprop": {"x": 1.0, "flops": 100.0, "time_s": 3.0, "time_dram_s": 1.0, "bound": "compute",
                  "ai_l1": 10.0, "ai_dram": 4.0, "waves": 2.0},
        "dgrad": {"x": 2.0, "flops": 100.0, "time_s": 2.0, "time_dram_s": 2.0, "bound": "dram",
                  "ai_l1": math.inf, "ai_dram": 2.0, "waves": 5.0},
        "wgrad": {"x": 4.0, "flops": 200.0, "time_s": 2.0, "time_dram_s": 2.0, "bound": "dram",
                  "ai_l1": 20.0, "ai_dram": 100.0, "waves": 1.0},
    }
    step = step_total(passes)
    assert step["x"] == 7.0 and step["flops"] == 400.0 and step["time_s"] == 7.0 and step["time_dram_s"] == 5.0
    # bytes: L1 10 + 0 + 10 = 20 -> 400 / 20; DRAM 25 + 50 + 2 = 77
    assert step["ai_l1"] == pytest.approx(20.0)
    assert step["ai_dram"] == pytest.approx(400.0 / 77.0)
    # dram carries 4 s of 7, compute 3 s
    assert step["bound"] == "dram" and step["bound_share"] == pytest.approx(4.0 / 7.0)
    assert "waves" not in step


def test_step_total_without_bytes_at_a_level_is_infinite_intensity():
    step = step_total({"a": {"flops": 5.0, "ai_l2": math.inf, "time_s": 1.0, "bound": "compute"}})
    assert step["ai_l2"] == math.inf and step["bound"] == "compute" and step["bound_share"] == 1.0


def test_pass_kernels_keep_the_kernel_and_reject_nchw():
    kernel = KernelConfig.from_tile("64x128x16", vector=2)
    kernels = pass_kernels(kernel)
    assert list(kernels) == ["fprop", "dgrad", "wgrad"]
    for op, k in kernels.items():
        assert k.op == op and (k.tile_m, k.tile_n, k.tile_k, k.vector) == (64, 128, 16, 2)
    with pytest.raises(ValueError, match="nhwc"):
        pass_kernels(KernelConfig(layout="nchw"))


@pytest.mark.parametrize("gpu_name", ["v100", "a100"])
def test_predict_step_is_the_sum_of_the_three_predictions(gpu_name):
    gpu = simcore.gpu(gpu_name)
    for layer in _tiny_layers():
        row = analytic.predict_step(layer, gpu)
        alone = {op: analytic.predict_layer(layer, gpu, KernelConfig(op=op)) for op in ("fprop", "dgrad", "wgrad")}
        for op in alone:
            assert row[op] == alone[op]
        for key in COUNT_KEYS + ("time_s", "flops", "time_compute_s"):
            assert row["step"][key] == pytest.approx(sum(alone[op][key] for op in alone), rel=1e-12)
        assert row["step"]["bound"] in {alone[op]["bound"] for op in alone}
        assert row["step"]["flops"] == 3 * layer.flops


@pytest.mark.parametrize("op", ["fprop", "dgrad", "wgrad"])
def test_layer_time_of_the_predicted_counts_is_the_prediction(op):
    """layer_time without grid figures derives the op's grid (analytic._geometry.grid): on the model's
    own counts it must give the model's time, for every op (strided dgrad included)."""
    gpu = simcore.gpu("v100")
    kernel = KernelConfig.from_tile("64x64x8", op=op)
    for layer in _tiny_layers() + [ConvLayer(3, 8, 31, 29, 24, 5, 5, stride=3, pad=2, name="d")]:
        pred = analytic.predict_layer(layer, gpu, kernel)
        again = analytic.layer_time(layer, gpu, kernel, pred)
        assert again["time_s"] == pytest.approx(pred["time_s"], rel=1e-12) and again["bound"] == pred["bound"]
        assert again["waves"] == pred["waves"]


def test_step_time_of_counts_sums_the_pass_times():
    gpu = simcore.gpu("a100")
    layer = _tiny_layers()[1]
    kernel = KernelConfig()
    counts = {op: analytic.predict_layer(layer, gpu, k) for op, k in pass_kernels(kernel).items()}
    step = step_time(layer, gpu, kernel, counts)
    assert step["time_s"] == pytest.approx(sum(c["time_s"] for c in counts.values()), rel=1e-12)


# ---- compare --op train ----------------------------------------------------------------------------
def _op_metrics(layer, kernel):
    out = _fake_metrics(layer)
    return {key: value * OP_SCALE[kernel.op] for key, value in out.items()}


def fake_simulate(layer, gpu, kernel, *, jobs=None):
    return _op_metrics(layer, kernel)


def fake_predict(layer, gpu, kernel, factors=None):
    out = {key: float(value) for key, value in _op_metrics(layer, kernel).items()}
    out[M.L2_RD_SECTORS] *= 1.1 if kernel.op == "wgrad" else 1.0
    seconds = OP_SECONDS[kernel.op]
    out.update(flops=float(layer.flops), time_s=seconds, bound="dram" if kernel.op == "wgrad" else "compute",
               time_compute_s=seconds, time_l1_s=0.0, time_l2_s=0.0, time_dram_s=seconds,
               ai_l1=1.0, ai_l2=2.0, ai_dram=3.0, waves=1.0)
    return out


@pytest.fixture
def train_fakes(monkeypatch):
    monkeypatch.setattr(compare, "simulate_layer", fake_simulate)
    monkeypatch.setattr(compare, "predict_layer", fake_predict)
    monkeypatch.setattr(compare, "reuse_factors_class", lambda: FakeFactors)
    return monkeypatch


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_compare_train_three_passes_per_layer_and_the_step(train_fakes, tmp_path, capsys, jobs):
    out_json, out_h5 = tmp_path / "t.json", tmp_path / "t.h5"
    assert compare.main(["alexnet", "--op", "train", "--json", str(out_json), "--h5", str(out_h5),
                         "--jobs", jobs]) == 0
    text = capsys.readouterr().out
    doc = json.loads(out_json.read_text())
    layers = [entry["name"] for entry in doc["layers"][::3]]
    assert doc["op"] == "train" and len(doc["layers"]) == 3 * len(layers) == 15
    assert [entry["op"] for entry in doc["layers"]] == ["fprop", "dgrad", "wgrad"] * len(layers)
    summary = doc["summary"]
    assert list(summary["passes"]) == ["fprop", "dgrad", "wgrad"]
    for op, part in summary["passes"].items():
        assert part["layers"] == len(layers)
        assert part["totals"]["simulated"][M.DRAM_RD_SECTORS] == \
            OP_SCALE[op] * summary["passes"]["fprop"]["totals"]["simulated"][M.DRAM_RD_SECTORS]
        assert part["predicted_time_s"] == pytest.approx(OP_SECONDS[op] * len(layers))
    assert [step["name"] for step in summary["steps"]] == layers
    for step in summary["steps"]:
        single = [e for e in doc["layers"] if e["name"] == step["name"]]
        for key in COUNT_KEYS:
            assert step["simulated"][key] == sum(e["simulated"][key] for e in single)
        assert step["predicted"]["time_s"] == pytest.approx(7e-6)
        assert step["predicted"]["bound"] == "dram" and step["predicted"]["bound_share"] == pytest.approx(4 / 7)
        assert step["errors"][M.L2_RD_SECTORS] == pytest.approx((1 + 2 + 3.3) / 6 - 1)
    assert summary["totals"]["predicted"]["time_s"] == pytest.approx(7e-6 * len(layers))
    assert "training step (fprop + dgrad + wgrad)" in text
    assert text.count("step predicted") == len(layers) + 1          # each layer and the network total
    assert "wgrad sim" in text and "conv1 (wgrad)" in text
    assert "cp.async" not in text                     # SIMT passes: no cp.async rows of zeros
    back = results.load_results(out_h5)
    assert [e["op"] for e in back["layers"]] == [e["op"] for e in doc["layers"]] and back["op"] == "train"
    assert results.main([str(out_h5), "--quiet"]) == 0
    assert "network total (5 layers)  step predicted" in capsys.readouterr().out


def test_compare_one_backward_op(train_fakes, tmp_path):
    out_json = tmp_path / "d.json"
    assert compare.main(["alexnet", "--op", "dgrad", "--quiet", "--json", str(out_json)]) == 0
    doc = json.loads(out_json.read_text())
    assert doc["op"] == "dgrad" and {e["op"] for e in doc["layers"]} == {"dgrad"}
    assert "passes" not in doc["summary"]


@pytest.mark.parametrize("argv, message", [
    (["alexnet", "--op", "train", "--layout", "nchw"], "--op train"),
    (["alexnet", "--op", "train", "--ncu-csv", "x.csv"], "--ncu-csv"),
    (["alexnet", "--op", "backward"], "invalid choice"),
])
def test_compare_train_bad_input(train_fakes, tmp_path, capsys, argv, message):
    assert compare.main(argv + ["--json", str(tmp_path / "x.json")]) == 2
    assert message in _stderr_line(capsys)
    assert not (tmp_path / "x.json").exists()


def test_accuracy_rows_per_op(tmp_path, monkeypatch, capsys):
    from validation import calibrate
    monkeypatch.setattr(calibrate, "simulate_layer", fake_simulate)
    layers = tmp_path / "tiny.json"
    layers.write_text(json.dumps({"layers": [layer.as_dict() for layer in _tiny_layers()]}))
    assert accuracy.main([str(layers), "--gpu", "v100", "--batch", "1", "--op", "train", "--quiet",
                          "--json", str(tmp_path / "a.json")]) == 0
    rows = json.loads((tmp_path / "a.json").read_text())["rows"]
    assert [row["op"] for row in rows] == ["fprop", "dgrad", "wgrad"]
    assert all(row["layers"] == 3 for row in rows)
    assert "| tiny | v100 | 1 | wgrad |" in capsys.readouterr().out


# ---- scaling / roofline --op train -------------------------------------------------------------------
def _layers_file(tmp_path):
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps({"layers": [layer.as_dict() for layer in _tiny_layers()]}))
    return str(path)


def test_scaling_train_is_the_step_of_each_layer(tmp_path):
    path = _layers_file(tmp_path)
    args = scaling.create_parser().parse_args([path, "--op", "train", "--scale", "sms=2", "--gpu", "a100"])
    scaling.check_arguments(args)
    data = scaling.scaling_data(args)
    gpu = simcore.gpu("a100")
    for row, layer in zip(data["base"], _tiny_layers()):
        layer = layer.with_batch(1)                  # --batch 1 (the default) sets every layer's batch
        times = [analytic.predict_layer(layer, gpu, KernelConfig(op=op))["time_s"] for op in ("fprop", "dgrad", "wgrad")]
        assert row["time_s"] == pytest.approx(sum(times), rel=1e-12)
    assert data["op"] == "train"


def test_scaling_train_check_puts_each_simulated_pass_through_the_time_model(tmp_path, capsys):
    from traces import simulate_layer
    path = _layers_file(tmp_path)
    json_path = tmp_path / "s.json"
    assert scaling.main([path, "--op", "train", "--scale", "l2_bytes=0.5", "--check", "--quiet",
                         "--json", str(json_path)]) == 0
    data = json.loads(json_path.read_text())
    gpu = simcore.gpu("v100")
    for row, layer in zip(data["base"], _tiny_layers()):
        layer = layer.with_batch(1)
        expect = 0.0
        for op, kernel in pass_kernels(KernelConfig()).items():
            expect += analytic.layer_time(layer, gpu, kernel, simulate_layer(layer, gpu, kernel))["time_s"]
        assert row["time_s_simulated"] == pytest.approx(expect, rel=1e-12)
    assert "training step" in capsys.readouterr().out


def test_roofline_train_points_are_steps(tmp_path):
    path = _layers_file(tmp_path)
    args = roofline.create_parser().parse_args([path, "--op", "train", "--batch", "1,4"])
    roofline.check_arguments(args)
    data = roofline.roofline_data(args)
    assert data["op"] == "train" and len(data["rows"]) == 2 * len(_tiny_layers())
    for row in data["rows"]:
        layer = [l for l in _tiny_layers() if l.name == row["layer"]][0].with_batch(row["batch"])
        assert row["flops"] == 3 * layer.flops
        step = analytic.predict_step(layer, simcore.gpu("v100"))["step"]
        assert row["time_s"] == pytest.approx(step["time_s"], rel=1e-12) and row["bound"] == step["bound"]
