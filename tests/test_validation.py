"""validation.compare / validation.results / validation.ncu, driven in-process with fake simulate/predict."""
from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest

from simcore import metrics as M
from validation import compare, ncu, report, results

# ---- fakes ---------------------------------------------------------------------------------------
CALLS = []


def fake_simulate(layer, gpu, kernel, *, jobs=None):
    CALLS.append(layer.name)
    return _fake_metrics(layer)


def _fake_metrics(layer):
    base = layer.gemm_m * layer.gemm_k // 8 + 64
    out = {key: 0 for key in M.all_keys()}
    out[M.L1_LD_REQUESTS] = base // 4
    out[M.L1_LD_SECTORS] = base
    out[M.L1_LD_HITS] = base // 2
    out[M.L1_LD_MISSES] = base - base // 2
    out[M.L2_RD_SECTORS] = base - base // 2
    out[M.L2_RD_HITS] = base // 4
    out[M.L2_RD_MISSES] = base - base // 2 - base // 4
    out[M.DRAM_RD_SECTORS] = base // 5
    out[M.DRAM_WR_SECTORS] = layer.output_elements // 8 + 1
    out[M.L1_ST_SECTORS] = out[M.L2_WR_SECTORS] = layer.output_elements // 8 + 1
    return out


def fake_predict(layer, gpu, kernel, factors=None):
    scale = 1.0 if factors is None else factors.scale
    out = {key: float(value) for key, value in _fake_metrics(layer).items()}
    out[M.L2_RD_SECTORS] *= 1.10 * scale
    out[M.DRAM_RD_SECTORS] *= 0.80
    out.update(flops=float(layer.flops), time_s=layer.flops / gpu.peak_flops, bound="compute",
               time_compute_s=layer.flops / gpu.peak_flops, time_l1_s=0.0, time_l2_s=0.0, time_dram_s=0.0,
               ai_l1=1.0, ai_l2=2.0, ai_dram=3.0, waves=1.0)
    return out


@dataclasses.dataclass(frozen=True)
class FakeFactors:
    scale: float = 1.0
    BOUNDS = {"scale": (0.1, 10.0)}

    def to_dict(self):
        return {"scale": self.scale}

    @classmethod
    def from_dict(cls, d):
        unknown = set(d) - {"scale"}
        if unknown:
            raise ValueError(f"unknown reuse factor(s) {sorted(unknown)}")
        return cls(**d)

    @classmethod
    def load(cls, path):
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        if not isinstance(data, dict) or data.get("format") != "fake-factors":
            raise ValueError(f"{path}: not a reuse-factors file")
        return cls.from_dict(data["factors"])

    def save(self, path):
        with open(path, "w", encoding="utf-8") as fh:
            json.dump({"format": "fake-factors", "factors": self.to_dict()}, fh)


class Interrupting:
    """simulate_layer stand-in that raises KeyboardInterrupt (Ctrl-C) on call number ``after + 1`` and
    before that calls ``simulate`` (default: ``fake_simulate``)."""

    def __init__(self, after, simulate=None):
        self.after, self.calls, self.simulate = after, 0, simulate or fake_simulate

    def __call__(self, layer, gpu, kernel, *, jobs=None):
        self.calls += 1
        if self.calls > self.after:
            raise KeyboardInterrupt
        return self.simulate(layer, gpu, kernel, jobs=jobs)


@pytest.fixture
def fakes(monkeypatch):
    CALLS.clear()
    monkeypatch.setattr(compare, "simulate_layer", fake_simulate)
    monkeypatch.setattr(compare, "predict_layer", fake_predict)
    monkeypatch.setattr(compare, "reuse_factors_class", lambda: FakeFactors)
    monkeypatch.setattr(compare, "start_first_run", lambda *args, **kwargs: [])    # the fakes compile nothing
    return monkeypatch


def _stderr_line(capsys):
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: "), err
    assert "\n" not in err, err
    return err


def _strip_volatile(doc):
    doc = json.loads(json.dumps(doc))
    doc.pop("created")
    doc["summary"].pop("simulation_seconds")
    for entry in doc["layers"]:
        entry.pop("simulation_seconds")
    return doc


# ---- compare CLI ---------------------------------------------------------------------------------
def test_help_lists_options(capsys):
    assert compare.main(["--help"]) == 0
    out = capsys.readouterr().out
    for option in ("--gpu", "--batch", "--layers", "--layers-file", "--layout", "--dtype", "--tile", "--vector",
                   "--factors", "--json", "--h5", "--plot", "--ncu-csv", "--jobs", "--quiet"):
        assert option in out


def test_compare_alexnet_tables_and_files(fakes, tmp_path, capsys):
    js, h5, png = tmp_path / "r.json", tmp_path / "r.h5", tmp_path / "r.png"
    assert compare.main(["alexnet", "--json", str(js), "--h5", str(h5), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "layer conv1" in out and "layer conv5" in out and "network total (5 layers)" in out
    assert "L2 read sectors" in out and "+10.0%" in out and "-20.0%" in out
    assert "compute-bound" in out
    doc = results.load_results(js)
    assert doc["complete"] is True and doc["network"] == "alexnet" and doc["batch"] == 1
    assert [e["name"] for e in doc["layers"]] == ["conv1", "conv2", "conv3", "conv4", "conv5"]
    entry = doc["layers"][0]
    assert set(M.all_keys()) <= set(entry["simulated"]) and "time_s" in entry["predicted"]
    assert entry["errors"][M.L2_RD_SECTORS] == pytest.approx(0.10)
    assert entry["errors"][M.DRAM_RD_SECTORS] == pytest.approx(-0.20, abs=1e-3)
    stats = doc["summary"]["errors"][M.L2_RD_SECTORS]
    assert stats["mean_abs"] == pytest.approx(0.10) and stats["worst_abs"] == pytest.approx(0.10)
    assert doc["gpu"]["name"] == "v100" and doc["kernel"]["tile_m"] == 128
    assert doc["versions"]["numpy"] == np.__version__
    # HDF5 holds the same document
    assert results.load_results(h5) == doc
    import h5py
    with h5py.File(h5) as f:
        assert f["simulated"][M.DRAM_RD_SECTORS].shape == (5,)
        assert f.attrs["version_numpy"] == np.__version__
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [p for p in os.listdir(tmp_path) if ".tmp" in p]


def test_compare_jobs_2_matches_jobs_1(fakes, tmp_path, capsys):
    one, two = tmp_path / "1.json", tmp_path / "2.json"
    assert compare.main(["alexnet", "--quiet", "--json", str(one)]) == 0
    assert compare.main(["alexnet", "--quiet", "--jobs", "2", "--json", str(two)]) == 0
    assert _strip_volatile(results.load_results(one)) == _strip_volatile(results.load_results(two))
    out = capsys.readouterr().out
    assert "layer conv1" not in out and "network total" in out


def test_compare_layer_subset_batch_and_kernel(fakes, tmp_path):
    js = tmp_path / "r.json"
    assert compare.main(["vgg16", "--layers", "conv1_2,conv3_1", "--batch", "4", "--tile", "64x64x8",
                         "--layout", "nchw", "--quiet", "--json", str(js)]) == 0
    doc = results.load_results(js)
    assert [e["name"] for e in doc["layers"]] == ["conv1_2", "conv3_1"]
    assert doc["batch"] == 4 and doc["layers"][0]["layer"]["n"] == 4
    assert doc["kernel"]["tile_m"] == 64 and doc["kernel"]["layout"] == "nchw"
    assert compare.main(["alexnet", "--op", "wgrad", "--quiet", "--json", str(js)]) == 0
    assert results.load_results(js)["kernel"]["op"] == "wgrad"


def test_compare_layers_file(fakes, tmp_path):
    layers = tmp_path / "layers.json"
    layers.write_text(json.dumps([{"name": "tiny", "n": 2, "c": 8, "h": 6, "w": 6, "k": 16, "r": 3, "s": 3, "pad": 1},
                                  {"name": "tiny2", "n": 2, "c": 8, "h": 6, "w": 6, "k": 8, "r": 1, "s": 1}]))
    js = tmp_path / "r.json"
    assert compare.main(["--layers-file", str(layers), "--quiet", "--json", str(js)]) == 0
    doc = results.load_results(js)
    assert doc["network"] is None and doc["batch"] == 2 and len(doc["layers"]) == 2
    assert compare.main(["--layers-file", str(layers), "--batch", "3", "--quiet", "--json", str(js)]) == 0
    assert results.load_results(js)["layers"][1]["layer"]["n"] == 3


def test_compare_factors_file(fakes, tmp_path):
    factors = tmp_path / "f.json"
    FakeFactors(scale=2.0).save(factors)
    js = tmp_path / "r.json"
    assert compare.main(["alexnet", "--factors", str(factors), "--quiet", "--json", str(js)]) == 0
    doc = results.load_results(js)
    assert doc["factors"] == {"scale": 2.0}
    assert doc["layers"][0]["errors"][M.L2_RD_SECTORS] == pytest.approx(1.2)


def _csv(path, rows):
    path.write_text("\n".join(",".join(f'"{c}"' for c in row) for row in rows) + "\n")
    return path


BAD_INPUTS = [
    (["resnet51"], "unknown network 'resnet51'; known networks: vgg16, resnet50"),
    (["alexnet", "--gpu", "v200"], "unknown GPU 'v200'; known GPUs:"),
    (["alexnet", "--tile", "128x128"], "tile must look like MxNxK"),
    (["alexnet", "--tile", "128xabcx8"], "tile must look like MxNxK"),
    (["alexnet", "--layers", "conv1,conv9"], "unknown layer(s) conv9; layers of alexnet: conv1, conv2"),
    (["alexnet", "--factors", "{tmp}/missing.json"], "missing.json: file not found"),
    (["alexnet", "--factors", "{tmp}/garbage.json"], "cannot read reuse factors"),
    (["alexnet", "--ncu-csv", "{tmp}/nocols.csv"], "missing metric(s) l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"),
    (["alexnet", "--ncu-csv", "{tmp}/missing.csv"], "file not found"),
    (["alexnet", "--jobs", "0"], "--jobs"),
    (["alexnet", "--vector", "3"], "vector"),
    (["alexnet", "--op", "dgrad", "--layout", "nchw"], "is defined for layout 'nhwc' only"),
    (["alexnet", "--op", "bprop"], "invalid choice: 'bprop'"),
    (["--layers-file", "{tmp}/missing.json"], "layer file not found"),
    ([], "give a NETWORK"),
    (["alexnet", "--plot", "{tmp}/nodir/p.png"], "does not exist"),
]


@pytest.mark.parametrize("argv, message", BAD_INPUTS)
def test_compare_bad_input(fakes, tmp_path, capsys, argv, message):
    (tmp_path / "garbage.json").write_text("{not json")
    _csv(tmp_path / "nocols.csv", [["ID", "Kernel Name", "dram__sectors_read.sum"],
                                   *[[str(i), "k", "1,000"] for i in range(5)]])
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    out = tmp_path / "out.json"
    assert compare.main(argv + ["--json", str(out)]) == 2
    err = _stderr_line(capsys)
    assert message in err
    assert not out.exists()
    assert CALLS == []


def test_compare_interrupt_keeps_finished_layers(fakes, tmp_path, capsys):
    fakes.setattr(compare, "simulate_layer", Interrupting(after=2))
    js, h5 = tmp_path / "r.json", tmp_path / "r.h5"
    assert compare.main(["alexnet", "--json", str(js), "--h5", str(h5)]) == 130
    doc = results.load_results(js)
    assert doc["complete"] is False and doc["error"] == "interrupted"
    assert [e["name"] for e in doc["layers"]] == ["conv1", "conv2"]
    assert doc["summary"]["layers"] == 2
    assert results.load_results(h5) == doc
    assert "interrupted: 2 of 5 layers done" in capsys.readouterr().err
    assert not [p for p in os.listdir(tmp_path) if ".tmp" in p]


# ---- results files -------------------------------------------------------------------------------
def _doc(tmp_path, fakes):
    js = tmp_path / "r.json"
    assert compare.main(["alexnet", "--layers", "conv2,conv3", "--quiet", "--json", str(js),
                         "--h5", str(tmp_path / "r.h5")]) == 0
    return js, tmp_path / "r.h5"


def test_results_version_and_format_checked(fakes, tmp_path, capsys):
    js, h5 = _doc(tmp_path, fakes)
    doc = json.loads(js.read_text())
    doc["version"] = 99
    other = tmp_path / "v99.json"
    other.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="version 99"):
        results.load_results(other)
    doc["format"] = "something-else"
    other.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="format 'something-else'"):
        results.load_results(other)
    import h5py
    with h5py.File(h5, "a") as f:
        f.attrs["version"] = json.dumps(2)
    with pytest.raises(ValueError, match="version 2"):
        results.load_results(h5)


def test_results_corrupt_hdf5(fakes, tmp_path, capsys):
    js, h5 = _doc(tmp_path, fakes)
    truncated = tmp_path / "trunc.h5"
    truncated.write_bytes(h5.read_bytes()[:600])
    junk = tmp_path / "junk.h5"
    junk.write_bytes(b"\x89HDF\r\n\x1a\n" + b"\x00garbage" * 20)
    for path in (truncated, junk):
        with pytest.raises(ValueError, match="corrupt"):
            results.load_results(path)
        assert results.main([str(path)]) == 2
        assert "corrupt" in _stderr_line(capsys)
    assert results.main([str(h5), "--quiet"]) == 0
    assert "network total (2 layers)" in capsys.readouterr().out


# ---- ncu CSV -------------------------------------------------------------------------------------
NEEDED = [M.L1_LD_SECTORS, M.L1_LD_HITS, M.L2_RD_SECTORS, M.DRAM_RD_SECTORS, M.DRAM_WR_SECTORS]


def test_ncu_raw_layout_with_units_row(tmp_path):
    path = _csv(tmp_path / "raw.csv", [
        ["==PROF== Connected to process 1234"],
        ["ID", "Process ID", "Kernel Name", *NEEDED],
        ["", "", "", "sector", "sector", "Ksector", "sector", "sector"],
        ["0", "1234", "implicit_gemm", "1,234,567", "1,000", "2.5", "400", "50"],
        ["1", "1234", "implicit_gemm", "10", "5", "1", "7", "8"],
    ])
    launches = ncu.read_ncu_csv(path)
    assert len(launches) == 2
    assert launches[0]["metrics"][M.L1_LD_SECTORS] == 1234567
    assert launches[0]["metrics"][M.L2_RD_SECTORS] == 2500
    assert launches[0]["kernel"] == "implicit_gemm"


def test_ncu_long_layout(tmp_path):
    rows = [["ID", "Process ID", "Kernel Name", "Section Name", "Metric Name", "Metric Unit", "Metric Value"]]
    for launch in range(3):
        for i, name in enumerate(NEEDED):
            rows.append([str(launch), "99", "conv_kernel", "Command line profiler metrics", name, "sector",
                         f"{(launch + 1) * (i + 1) * 1000:,}"])
    path = _csv(tmp_path / "long.csv", rows)
    launches = ncu.read_ncu_csv(path)
    assert [l["id"] for l in launches] == ["0", "1", "2"]
    assert launches[2]["metrics"][M.DRAM_WR_SECTORS] == 15000
    from traces.networks import network
    layers = network("alexnet")[:3]
    measured = ncu.match_measurements(launches, layers)
    assert measured[1][M.L1_LD_SECTORS] == 2000 and measured[1]["l1_hit_rate"] == pytest.approx(2.0)
    with pytest.raises(ValueError, match="3 kernel launches but 5 layers"):
        ncu.match_measurements(launches, network("alexnet"))


def test_ncu_layer_column_matches_by_name(tmp_path):
    path = _csv(tmp_path / "named.csv", [
        ["layer", *NEEDED],
        ["conv3", "300", "30", "3", "3", "3"],
        ["conv1", "100", "10", "1", "1", "1"],
        ["conv1", "100", "10", "1", "1", "1"],     # a second launch of conv1: summed
    ])
    from traces.networks import network
    measured = ncu.load_measurements(path, network("alexnet"))
    assert measured[0][M.L1_LD_SECTORS] == 200 and measured[2][M.L1_LD_SECTORS] == 300
    assert measured[1] is None


def test_ncu_not_a_csv_export(tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("hello,world\n1,2\n")
    with pytest.raises(ValueError, match="no header row"):
        ncu.read_ncu_csv(path)


def test_compare_with_ncu_measurements(fakes, tmp_path, capsys):
    rows = [["ID", "Kernel Name", *NEEDED]]
    from traces.networks import network
    for i, layer in enumerate(network("alexnet")):
        sim = _fake_metrics(layer)
        rows.append([str(i), "k", *[f"{int(sim[key] * 1.25):,}" for key in NEEDED]])
    path = _csv(tmp_path / "m.csv", rows)
    js = tmp_path / "r.json"
    assert compare.main(["alexnet", "--ncu-csv", str(path), "--json", str(js)]) == 0
    out = capsys.readouterr().out
    assert "measured" in out and "sim err" in out and "vs measured" in out
    doc = results.load_results(js)
    entry = doc["layers"][0]
    assert entry["measured"][M.L1_LD_SECTORS] == pytest.approx(entry["simulated"][M.L1_LD_SECTORS] * 1.25, rel=1e-4)
    assert entry["measured_errors"]["simulated"][M.L1_LD_SECTORS] == pytest.approx(-0.2, abs=1e-3)
    assert doc["summary"]["measured_layers"] == 5
    assert results.load_results(tmp_path / "r.json") == doc


# ---- formatting ----------------------------------------------------------------------------------
@pytest.mark.parametrize("value, text", [(0, "0"), (7, "7"), (950, "950"), (999.9, "1.00k"), (1234, "1.23k"),
                                         (12_345_678, "12.3M"), (4.56e9, "4.56G"), (-2500, "-2.50k"),
                                         (0.5, "0.5"), (None, "-")])
def test_eng(value, text):
    assert report.eng(value) == text


def test_eng_time_and_pct():
    assert report.eng_time(12.3e-6) == "12.3 us" and report.eng_time(0.0045) == "4.50 ms"
    assert report.pct(0.0123) == "+1.2%" and report.pct(-1e-9) == "+0.0%" and report.pct(None) == "n/a"


# ---- real simulation (and the real model once analytic provides it) on tiny layers -----------------
TINY = [{"name": "tiny3x3", "n": 1, "c": 16, "h": 10, "w": 10, "k": 32, "r": 3, "s": 3, "pad": 1},
        {"name": "tiny1x1", "n": 2, "c": 8, "h": 6, "w": 6, "k": 16, "r": 1, "s": 1}]


def test_compare_real_simulation_tiny_layers(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(compare, "predict_layer", fake_predict)
    layers = tmp_path / "tiny.json"
    layers.write_text(json.dumps(TINY))
    js, h5 = tmp_path / "r.json", tmp_path / "r.h5"
    assert compare.main(["--layers-file", str(layers), "--json", str(js), "--h5", str(h5), "--tile", "32x32x8",
                         "--threads", "64"]) == 0
    doc = results.load_results(js)
    assert results.load_results(h5) == doc
    from traces import KernelConfig, load_layers, simulate_layer
    import simcore
    kernel = KernelConfig(tile_m=32, tile_n=32, tile_k=8, threads=64)
    for entry, layer in zip(doc["layers"], load_layers(layers)):
        assert entry["simulated"] == {**simulate_layer(layer, simcore.gpu("v100"), kernel),
                                      "l1_hit_rate": entry["simulated"]["l1_hit_rate"],
                                      "l2_hit_rate": entry["simulated"]["l2_hit_rate"]}
        assert entry["simulated"][M.L1_LD_SECTORS] > 0


def test_compare_real_model_and_simulation(tmp_path, capsys):
    analytic = pytest.importorskip("analytic")
    if not hasattr(analytic, "predict_layer"):
        pytest.skip("analytic.predict_layer not available yet")
    layers = tmp_path / "tiny.json"
    layers.write_text(json.dumps(TINY))
    js = tmp_path / "r.json"
    assert compare.main(["--layers-file", str(layers), "--json", str(js), "--gpu", "a100", "--quiet"]) == 0
    doc = results.load_results(js)
    assert doc["complete"] and len(doc["layers"]) == 2
    for entry in doc["layers"]:
        assert entry["predicted"]["bound"] in ("compute", "l1", "l2", "dram")
        assert set(M.METRICS) <= set(entry["errors"])


def test_compare_rewrites_results_after_each_layer(fakes, tmp_path):
    js = tmp_path / "r.json"
    seen = []

    def watching(layer, gpu, kernel, *, jobs=None):
        seen.append(None if not js.exists() else
                    (len(results.load_results(js)["layers"]), results.load_results(js)["complete"]))
        return fake_simulate(layer, gpu, kernel, jobs=jobs)

    fakes.setattr(compare, "SAVE_INTERVAL_S", 0.0)
    fakes.setattr(compare, "simulate_layer", watching)
    assert compare.main(["alexnet", "--quiet", "--json", str(js)]) == 0
    assert seen == [None, (1, False), (2, False), (3, False), (4, False)]
    assert results.load_results(js)["complete"] is True
