"""Figures: roofline trajectories and scaling (analytic.plots via the CLIs), validation's empty panels."""
from __future__ import annotations

import json
import math
import os

import pytest

import simcore
import traces
from analytic import plots, predict_layer, roofline, scaling
from analytic.scaling import scale_gpu
from simcore import metrics as M
from traces import KernelConfig
from validation import report

matplotlib = pytest.importorskip("matplotlib")

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _png_size(path):
    """(width, height) of a PNG file, checking its signature and IHDR chunk."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def _check_row(row, pred):
    for key in ("flops", "time_s", "time_compute_s", "time_l1_s", "time_l2_s", "time_dram_s",
                "ai_l1", "ai_l2", "ai_dram"):
        if math.isinf(pred[key]):
            assert row[key] is None, key                      # strict JSON: inf is written as null
        else:
            assert row[key] == pytest.approx(pred[key], rel=1e-12), key
    assert row["bound"] == pred["bound"]
    assert row["gflops_per_s"] == pytest.approx(pred["flops"] / pred["time_s"] / 1e9, rel=1e-12)


def _texts(ax):
    return [t.get_text() for t in ax.texts]


# ---- roofline ------------------------------------------------------------------------------------
def test_roofline_batch_points_are_the_models(tmp_path, capsys):
    png, js = tmp_path / "r.png", tmp_path / "r.json"
    assert roofline.main(["alexnet", "--gpu", "h100", "--batch", "8,1", "-o", str(png), "--json", str(js)]) == 0
    doc = json.loads(js.read_text())
    assert doc["vary"] == "batch" and doc["values"] == [1, 8] and doc["sms"] == [132]
    h100, kernel = simcore.gpu("h100"), KernelConfig()
    expected = {(layer.name, b): predict_layer(layer, h100, kernel)
                for b in (1, 8) for layer in traces.network("alexnet", b)}
    assert sorted((r["layer"], r["batch"]) for r in doc["rows"]) == sorted(expected)
    for row in doc["rows"]:
        assert row["value"] == row["batch"] and row["sms"] == 132
        _check_row(row, expected[(row["layer"], row["batch"])])
    assert [c["value"] for c in doc["ceilings"]] == [1, 8]
    for c in doc["ceilings"]:
        assert c["compute"] == pytest.approx(h100.fp32_tflops * 1e12)
        assert c["dram"] == pytest.approx(h100.dram_gbps * 1e9) and c["l2"] == pytest.approx(h100.l2_gbps * 1e9)
    width, height = _png_size(png)
    assert width > 1000 and height > 400
    assert "batch 8: total" in capsys.readouterr().out


def test_roofline_sms_points_move_with_sms(tmp_path):
    js, png = tmp_path / "s.json", tmp_path / "s.png"
    assert roofline.main(["vgg16", "--gpu", "v100", "--vary", "sms", "--sms", "160,40,80", "--batch", "4",
                          "--json", str(js), "-o", str(png)]) == 0
    doc = json.loads(js.read_text())
    assert doc["vary"] == "sms" and doc["values"] == [40, 80, 160] and doc["batch"] == [4]
    v100, kernel = simcore.gpu("v100"), KernelConfig()
    layers = traces.network("vgg16", 4)
    gpus = {n: scale_gpu(v100, {"sms": n / v100.sms}) for n in (40, 80, 160)}
    assert [g.sms for g in gpus.values()] == [40, 80, 160] and gpus[80] == v100
    for row in doc["rows"]:
        assert row["value"] == row["sms"] and row["batch"] == 4
        _check_row(row, predict_layer(layers[row["index"]], gpus[row["sms"]], kernel))
    # each GPU's roofs, and the points move: the compute roof grows with the SMs, so does the network
    ceilings = {c["sms"]: c for c in doc["ceilings"]}
    for n, gpu in gpus.items():
        assert ceilings[n]["compute"] == pytest.approx(gpu.fp32_tflops * 1e12)
        assert ceilings[n]["l1"] == pytest.approx(gpu.l1_bytes_per_clk * n * gpu.clock_mhz * 1e6)
        assert ceilings[n]["l2"] == pytest.approx(gpu.l2_gbps * 1e9)
        assert ceilings[n]["dram"] == pytest.approx(gpu.dram_gbps * 1e9)
    assert ceilings[160]["compute"] == pytest.approx(4 * ceilings[40]["compute"])
    total = {n: sum(r["time_s"] for r in doc["rows"] if r["sms"] == n) for n in (40, 80, 160)}
    assert total[40] > total[80] > total[160]
    moved = [i for i in range(len(layers))
             if len({r["gflops_per_s"] for r in doc["rows"] if r["index"] == i}) > 1]
    assert len(moved) > len(layers) // 2
    assert _png_size(png)[0] > 1000


def test_roofline_sms_default_values(tmp_path):
    js = tmp_path / "d.json"
    assert roofline.main(["alexnet", "--gpu", "v100", "--vary", "sms", "--json", str(js)]) == 0
    assert json.loads(js.read_text())["values"] == [20, 40, 80, 160]


@pytest.mark.parametrize("argv,words", [
    (["vgg16", "--vary", "sms", "--batch", "1,8"], "--batch takes one value"),
    (["vgg16", "--sms", "40,80"], "--sms takes one value"),
    (["vgg16", "--vary", "sms", "--sms", "40,0"], "--sms must be positive"),
    (["vgg16", "--vary", "sms", "--sms", "80,40,80"], "given twice"),
    (["vgg16", "--batch", "4,4"], "given twice"),
    (["vgg16", "--vary", "cores"], "--vary"),
    (["vgg16", "--top", "0"], "--top"),
    (["vgg16", "-o", "{tmp}/r.pdf"], ".png"),
    (["vgg16", "-o", "{tmp}/nodir/r.png"], "does not exist"),
])
def test_roofline_bad_input(argv, words, tmp_path, capsys):
    js = tmp_path / "out.json"
    argv = [a.format(tmp=tmp_path) for a in argv] + ["--json", str(js)]
    assert roofline.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and words in err[0]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs a folder where no file can be made")
@pytest.mark.parametrize("option", ["-o", "--json"])
def test_roofline_unwritable_output(option, capsys):
    path = "/proc/deltasim-test" + (".png" if option == "-o" else ".json")
    assert roofline.main(["alexnet", option, path]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: cannot write {path}: ") and not os.path.exists(path)


def test_top_layers_by_summed_time():
    rows = [{"index": i, "time_s": t} for i, t in ((0, 1.0), (1, 3.0), (2, 2.0), (0, 2.5), (1, 0.1), (2, 0.2))]
    assert plots.top_layers(rows, 2) == [0, 1]                # 3.5, 3.1, 2.2
    assert plots.top_layers(rows, 9) == [0, 1, 2]


def test_level_note():
    rows = [{"ai_dram": math.inf, "gflops_per_s": 5.0}, {"ai_dram": None, "gflops_per_s": 5.0}]
    empty, hidden = plots.level_note(rows, "dram", "DRAM")
    assert "no layer moved any data at DRAM" in empty and hidden is None
    empty, hidden = plots.level_note(rows + [{"ai_dram": 2.0, "gflops_per_s": 5.0}], "dram", "DRAM")
    assert empty is None and hidden.startswith("2 point(s) with no DRAM traffic")
    assert plots.level_note([{"ai_dram": 2.0, "gflops_per_s": 5.0}], "dram", "DRAM") == (None, None)


def _roofline_doc(tmp_path, *argv):
    js = tmp_path / "doc.json"
    assert roofline.main([*argv, "--json", str(js)]) == 0
    return json.loads(js.read_text())


def test_roofline_figure_names_top_layers_arrows_and_values(tmp_path):
    doc = _roofline_doc(tmp_path, "alexnet", "--gpu", "a100", "--batch", "1,4,16")
    fig = plots.roofline_figure(doc, top=2)
    try:
        totals = {}
        for row in doc["rows"]:
            totals[row["layer"]] = totals.get(row["layer"], 0.0) + row["time_s"]
        top = sorted(totals, key=totals.get, reverse=True)[:2]
        legend = [t.get_text() for t in fig.legends[0].get_texts()]
        assert [text.split()[0] for text in legend[:2]] == top
        assert "the other 3 layers" in legend
        axes = fig.axes[:3]
        assert [ax.get_title().split(":")[0] for ax in axes] == ["L1", "L2", "DRAM"]
        for ax, level in zip(axes, ("l1", "l2", "dram")):
            # one arrowhead per layer whose points differ at this level; value labels name the batches
            moving = sum(1 for name in totals
                         if len({(r[f"ai_{level}"], r["gflops_per_s"]) for r in doc["rows"] if r["layer"] == name}) > 1)
            arrows = [c for c in ax.get_children() if getattr(c, "arrow_patch", None) is not None]
            assert len(arrows) == moving
            labels = {c.get_text() for c in ax.get_children()
                      if isinstance(c, matplotlib.text.Annotation) and c.arrow_patch is None}
            assert {"1", "4", "16"} <= {v for text in labels for v in text.replace("\u2013", ",").split(",")}
            assert any(text.startswith("compute ") for text in labels)
            assert any(text.startswith(("L1 ", "L2 ", "DRAM ")) for text in _texts(ax))
        assert "batch size grows (1 -> 4 -> 16)" in fig._suptitle.get_text()
    finally:
        plots.pyplot().close(fig)


def test_roofline_figure_says_why_a_panel_is_empty(tmp_path):
    doc = _roofline_doc(tmp_path, "alexnet", "--gpu", "v100")
    for row in doc["rows"]:
        row["ai_dram"] = None                     # no DRAM bytes: infinite intensity, written as null
    fig = plots.roofline_figure(doc)
    try:
        assert any("no layer moved any data at DRAM" in text for text in _texts(fig.axes[2]))
        assert not any("no layer" in text for text in _texts(fig.axes[0]))
    finally:
        plots.pyplot().close(fig)


# ---- scaling -------------------------------------------------------------------------------------
def test_scaling_figure_bounds_and_simulated_markers(tmp_path):
    js, png = tmp_path / "s.json", tmp_path / "s.png"
    assert scaling.main(["alexnet", "--gpu", "a100", "--batch", "16", "--dtype", "fp16", "--scale", "sms=2",
                         "--scale", "dram_gbps=2", "--json", str(js), "--plot", str(png)]) == 0
    assert _png_size(png)[1] > 300
    data = json.loads(js.read_text())
    fig = plots.scaling_figure(data)
    try:
        assert len(fig.axes) == 3 and not any(c.get_gid() == "simulated" for ax in fig.axes for c in ax.collections)
        assert "simulated speedup" not in [t.get_text() for t in fig.legends[0].get_texts()]
        for ax, scenario in zip(fig.axes[1:], data["scenarios"]):
            dots = [c for c in ax.collections if c.get_gid() == "predicted"][0]
            assert [x for x, _ in dots.get_offsets()] == pytest.approx([r["speedup"] for r in scenario["layers"]])
            colours = [tuple(c) for c in dots.get_facecolors()]
            assert colours == [matplotlib.colors.to_rgba(plots.BOUND_COLORS[r["bound"]]) for r in scenario["layers"]]
        base = fig.axes[0].patches
        assert [matplotlib.colors.to_rgba(plots.BOUND_COLORS[r["bound"]]) for r in data["base"]] == \
            [tuple(p.get_facecolor()) for p in base]
    finally:
        plots.pyplot().close(fig)
    # a simulated speedup (validation's --check) shows as a marker beside its layer's predicted one
    data["scenarios"][0]["layers"][1]["speedup_simulated"] = 1.5
    data["scenarios"][0]["layers"][3]["speedup_simulated"] = None
    data["scenarios"][1]["speedup_simulated"] = 1.25
    fig = plots.scaling_figure(data)
    try:
        marks = [[tuple(xy) for xy in c.get_offsets()] for ax in fig.axes[1:] for c in ax.collections
                 if c.get_gid() == "simulated"]
        n = len(data["base"])
        assert marks == [[(1.5, 1.0)], [(1.25, n + 0.8)]]
        assert "simulated speedup" in [t.get_text() for t in fig.legends[0].get_texts()]
    finally:
        plots.pyplot().close(fig)


# ---- validation: empty panels --------------------------------------------------------------------
def _entries(sim_writes, pred_writes):
    return [{"name": f"l{i}", "simulated": {M.DRAM_WR_SECTORS: s, M.L2_RD_SECTORS: 100 + i},
             "predicted": {M.DRAM_WR_SECTORS: p, M.L2_RD_SECTORS: 110.0 + i}}
            for i, (s, p) in enumerate(zip(sim_writes, pred_writes))]


def test_panel_notes():
    empty, hidden = report.panel_notes(_entries([0, 0], [0.0, 0.0]), M.DRAM_WR_SECTORS, "DRAM write sectors")
    assert empty.startswith("no layer wrote to DRAM\nduring the kernel") and hidden is None
    assert report.panel_notes(_entries([0, 0], [0.0, 0.0]), M.L2_RD_SECTORS, "L2 read sectors") == (None, None)
    empty, hidden = report.panel_notes(_entries([0, 5, 0], [3.0, 4.0, 0.0]), M.DRAM_WR_SECTORS, "DRAM write sectors")
    assert empty is None and hidden == "2 of 3 layers not shown (2 simulated 0, 1 predicted 0)"
    empty, _ = report.panel_notes(_entries([0, 0], [3.0, 4.0]), M.DRAM_WR_SECTORS, "DRAM write sectors")
    assert empty == "no layer to draw on log axes:\n2 simulated 0"
    entries = [{"simulated": {M.L1_ST_SECTORS: 0}, "predicted": {M.L1_ST_SECTORS: 0.0}}] * 2
    empty, _ = report.panel_notes(entries, M.L1_ST_SECTORS, "L1 store sectors")
    assert empty == "every layer's L1 store sectors is 0,\nsimulated and predicted"
    empty, _ = report.panel_notes(entries, M.L1_LD_SECTORS, "L1 load sectors")
    assert empty == "no layer to draw on log axes:\n2 without a value"
    assert report.panel_notes([], M.L1_LD_SECTORS, "L1 load sectors") == ("no layers", None)


def test_compare_plot_says_no_layer_wrote_to_dram(tmp_path):
    doc = {"network": "resnet50", "batch": 4, "gpu": {"name": "a100"}, "layers": _entries([0, 0, 0], [0.0] * 3)}
    png = tmp_path / "c.png"
    notes = report.plot_document(doc, png)
    assert notes["DRAM write sectors"].startswith("no layer wrote to DRAM\nduring the kernel")
    assert "L2 read sectors" not in notes
    assert _png_size(png) == (1600, 800)
