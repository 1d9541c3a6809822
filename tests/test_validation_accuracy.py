"""validation.accuracy: error aggregation against DESIGN section 8 targets, and the CLI."""
import json

from simcore import gpu, metrics as M
from traces import ConvLayer, KernelConfig
from validation import accuracy


def _metrics(l1, l2, dram, dram_w=10):
    return {M.L1_LD_REQUESTS: l1, M.L1_LD_SECTORS: l1, M.L2_RD_SECTORS: l2, M.DRAM_RD_SECTORS: dram,
            M.DRAM_WR_SECTORS: dram_w}


def test_rows_apply_the_targets():
    kernel = KernelConfig()
    v100 = gpu("v100")
    aligned = ConvLayer(1, 8, 8, 8, 8, 3, 3, pad=1, name="a")      # C*4 = 32 bytes: L1 must be exact
    ragged = ConvLayer(1, 3, 8, 8, 8, 3, 3, pad=1, name="b")       # C*4 = 12 bytes: within 1 %
    cases = [("net/a@v100/b1", aligned, v100), ("net/b@v100/b1", ragged, v100)]
    sim = [_metrics(100, 100, 100), _metrics(1000, 100, 100)]
    # L2: errors 4 % and 6 % -> mean 5 % (ok), worst 6 % (ok). DRAM: 30 % on one layer -> worst fails.
    pred = [_metrics(100, 104, 100), _metrics(1005, 106, 130)]
    (row,) = accuracy.accuracy_rows(cases, sim, pred, kernel)
    m = row["metrics"]
    assert m["L1 ld sectors"]["ok"] is True                 # exact on a, 0.5 % on b
    assert abs(m["L2 rd sectors"]["mean"] - 0.05) < 1e-12 and m["L2 rd sectors"]["ok"] is True
    assert abs(m["DRAM rd sectors"]["worst"] - 0.30) < 1e-12 and m["DRAM rd sectors"]["ok"] is False
    pred[0] = _metrics(101, 104, 100)                        # one sector off on an aligned layer
    (row,) = accuracy.accuracy_rows(cases, sim, pred, kernel)
    assert row["metrics"]["L1 ld sectors"]["ok"] is False


def test_cli_on_a_tiny_layer_file(tmp_path, capsys):
    layers = tmp_path / "tiny.json"
    layers.write_text(json.dumps([{"n": 1, "c": 8, "h": 6, "w": 6, "k": 16, "r": 3, "s": 3, "pad": 1,
                                   "name": "t"}]))
    out = tmp_path / "acc.md"
    assert accuracy.main([str(layers), "--gpu", "v100", "--batch", "1", "--quiet", "--markdown", str(out)]) == 0
    text = out.read_text()
    assert "| tiny | v100 | 1 |" in text and text in capsys.readouterr().out


def test_cli_bad_gpu_exits_2_without_output(tmp_path, capsys):
    out = tmp_path / "acc.md"
    assert accuracy.main(["vgg16", "--gpu", "v101", "--markdown", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "v101" in err[0]
    assert not out.exists()
