"""Results files and ncu exports with and without the ldgsts (cp.async) metric keys: files written
before those keys existed still load and print; the keys read from an ncu export are kept."""
import json

from simcore import metrics as M
from tests.test_validation import _doc, fakes  # noqa: F401  (the fixture)
from validation import ncu, results


def _without_ldgsts(value):
    """``value`` (a results document or part of one) with every ldgsts key removed, at any depth."""
    if isinstance(value, dict):
        return {k: _without_ldgsts(v) for k, v in value.items() if k.split(":")[0] not in M.LDGSTS_METRICS}
    if isinstance(value, list):
        return [_without_ldgsts(v) for v in value]
    return value


def test_results_written_before_the_ldgsts_keys_still_load_and_print(fakes, tmp_path, capsys):  # noqa: F811
    js, _ = _doc(tmp_path, fakes)
    doc = results.load_results(js)
    assert all(key in doc["layers"][0]["simulated"] for key in M.LDGSTS_METRICS)      # written now
    old = _without_ldgsts(doc)
    assert not any(key in old["layers"][0]["simulated"] for key in M.LDGSTS_METRICS)
    old_js, old_h5 = tmp_path / "old.json", tmp_path / "old.h5"
    results.write_results(old, json_path=old_js, h5_path=old_h5)
    assert results.load_results(old_js) == json.loads(json.dumps(old))
    assert results.load_results(old_h5) == results.load_results(old_js)
    capsys.readouterr()
    for path in (old_js, old_h5):
        assert results.main([str(path), "--quiet"]) == 0
        assert "network total (2 layers)" in capsys.readouterr().out


def test_ncu_export_with_ldgsts_columns(tmp_path):
    needed = [M.L1_LD_SECTORS, M.L2_RD_SECTORS, M.DRAM_RD_SECTORS, M.DRAM_WR_SECTORS,
              M.L1_LDGSTS_BYPASS_SECTORS, M.L1_LDGSTS_ACCESS_HITS]
    path = tmp_path / "ncu.csv"
    path.write_text('"ID","Kernel Name",' + ",".join(f'"{k}"' for k in needed) + "\n"
                    '"0","implicit_gemm",' + ",".join(f'"{10 * (i + 1)}"' for i in range(len(needed))) + "\n")
    launches = ncu.read_ncu_csv(path)
    assert launches[0]["metrics"][M.L1_LDGSTS_BYPASS_SECTORS] == 50.0
    assert launches[0]["metrics"][M.L1_LDGSTS_ACCESS_HITS] == 60.0
