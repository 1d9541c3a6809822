"""validation.random_cases and the --random modes of validation.accuracy and validation.calibrate."""
import json

import pytest

from validation import accuracy, calibrate
from validation.random_cases import FAMILIES, random_case, random_cases, simulated_sectors


def test_cases_are_reproducible_and_independent_of_the_count():
    a = random_cases(12, 7)
    b = random_cases(5, 7)
    assert a[:5] == b
    assert random_case(7, 9) == a[9]
    assert random_cases(12, 8) != a


def test_cases_are_valid_and_cover_the_distribution():
    cases = random_cases(120, 3)
    families = {c.layer.name.split("_")[0] for c in cases}
    assert families == set(FAMILIES)
    assert {c.kernel.layout for c in cases} == {"nhwc", "nchw"}
    assert {c.kernel.dtype for c in cases} == {"fp32", "fp16", "bf16"}
    tensorop = [c for c in cases if c.kernel.math == "tensorop"]
    assert 10 <= len(tensorop) <= 50 and {c.kernel.dtype for c in tensorop} == {"fp16", "bf16"}
    for c in tensorop:                                     # tensor-op: fprop, on GPUs with tensor cores
        assert c.kernel.op == "fprop" and c.kernel.dtype in c.gpu.tensor_dtypes
    assert all(c.kernel.dtype != "bf16" for c in cases if c.kernel.math == "simt")
    assert {c.kernel.swizzle_log for c in cases} >= {0, 1, 2, 3}
    assert any(c.gpu_change for c in cases) and any(not c.gpu_change for c in cases)
    assert any(c.kernel.ctas_per_sm for c in cases)
    for c in cases:
        c.kernel.check_layer(c.layer)
        c.kernel.l1_config(c.gpu)                          # fits the (hypothetical) GPU
        assert 1 <= c.layer.n <= 64
        assert simulated_sectors(c.layer, c.kernel) <= 400_000_000


def test_sector_cap():
    for c in random_cases(30, 5, max_sectors=2_000_000):
        assert simulated_sectors(c.layer, c.kernel) <= 2_000_000


@pytest.mark.parametrize("bad", [(-1, 0), (0, -2), (1.5, 0)])
def test_bad_seed_or_index(bad):
    with pytest.raises(ValueError):
        random_case(*bad)


def test_accuracy_random_cli(tmp_path, capsys):
    js = tmp_path / "r.json"
    assert accuracy.main(["--random", "3", "--seed", "11", "--max-sectors", "300000", "--quiet",
                          "--json", str(js)]) == 0
    out = capsys.readouterr().out
    assert "3 random cases, seed 11" in out and "DRAM rd sectors" in out
    assert "python -m validation.accuracy --random" in out          # the reproducing commands
    doc = json.loads(js.read_text())
    assert len(doc["cases"]) == 3 and doc["seed"] == 11
    case = doc["cases"][1]
    # the one-line command reproduces that case
    assert accuracy.main(["--random", "2", "--seed", "11", "--case", "1", "--max-sectors", "300000",
                          "--quiet", "--json", str(js)]) == 0
    again = json.loads(js.read_text())["cases"][0]
    assert again["layer"] == case["layer"] and again["simulated"] == case["simulated"]


def test_accuracy_random_commands_name_the_cap_and_the_factors(tmp_path, capsys):
    """The printed command of a worst case, run as printed, predicts that case with the same factors."""
    factors = tmp_path / "f.json"
    factors.write_text(json.dumps({"format": "deltasim-factors", "version": 2,
                                   "factors": {"l1_hit_lo": 0.9, "l1_hit_hi": 1.5}}))
    js = tmp_path / "r.json"
    assert accuracy.main(["--random", "2", "--seed", "11", "--max-sectors", "300000", "--quiet", "--worst", "2",
                          "--factors", str(factors), "--json", str(js)]) == 0
    commands = [line.strip() for line in capsys.readouterr().out.splitlines()
                if line.strip().startswith("python -m validation.accuracy")]
    assert len(commands) == 2
    doc = json.loads(js.read_text())
    for command in commands:
        argv = command.split()[3:]
        assert argv[argv.index("--max-sectors") + 1] == "300000" and argv[argv.index("--factors") + 1] == str(factors)
        index = int(argv[argv.index("--case") + 1])
        assert accuracy.main(argv + ["--quiet", "--json", str(js)]) == 0
        again = json.loads(js.read_text())["cases"][0]
        case = next(c for c in doc["cases"] if c["command"] == command)
        assert again["layer"] == case["layer"] and again["predicted"] == case["predicted"], index


@pytest.mark.parametrize("argv", [["vgg16", "--random", "3"], ["--case", "1", "vgg16"],
                                  ["--random", "3", "--case", "3"], [], ["--random", "2", "--seed", "-1"]])
def test_accuracy_random_bad_input(argv, capsys):
    assert accuracy.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")


def test_calibrate_random_with_held_out_cases(tmp_path, capsys):
    out = tmp_path / "f.json"
    assert calibrate.main(["--random", "4", "--seed", "21", "--holdout-random", "2", "--holdout-seed", "22",
                           "--sweeps", "1", "--fields", "l2_capacity", "--quiet", "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["meta"]["fit"] == {"random": 4, "seed": 21}
    assert doc["meta"]["holdout"]["seed"] == 22
    text = capsys.readouterr().out
    assert "held-out set" in text and "4 random cases" in text
    assert calibrate.main(["--random", "4", "--holdout-random", "2", "--holdout-seed", "1", "-o",
                           str(tmp_path / "g.json")]) == 2                  # held-out seed == fit seed


def test_cases_cover_the_ops_independently_of_the_rest(monkeypatch):
    import dataclasses

    from validation import random_cases as rc
    # (grouping is drawn after the op, for fprop only: test_grouped_cases_join_without_changing_the_others)
    monkeypatch.setattr(rc, "_draw_groups", lambda seed, index, layer, kernel, cap: layer)
    cases = random_cases(120, 5)
    ops = [case.kernel.op for case in cases if case.kernel.math == "simt"]
    assert all(ops.count(op) >= 10 for op in ("fprop", "dgrad", "wgrad"))
    for case in cases:
        if case.kernel.op != "fprop":
            assert case.kernel.layout == "nhwc"
            case.kernel.check_layer(case.layer)
    # the op is drawn from a generator of its own: without it, the same layers, GPUs and kernels
    monkeypatch.setattr(rc, "_draw_op", lambda seed, index, layer, kernel: kernel)
    plain = random_cases(120, 5)
    for case, other in zip(cases, plain):
        assert dataclasses.replace(case.kernel, op="fprop") == other.kernel
        assert case.gpu == other.gpu
        assert case.layer.with_batch(1) == other.layer.with_batch(1)


def test_grouped_cases_join_without_changing_the_others(monkeypatch):
    import dataclasses

    from validation import random_cases as rc
    cases = random_cases(120, 4)
    grouped = [case for case in cases if case.layer.groups > 1]
    assert len(grouped) >= 5
    assert any(c.layer.groups == c.layer.c == c.layer.k for c in grouped)          # depthwise
    assert any(1 < c.layer.groups < c.layer.c for c in grouped)                     # grouped
    for case in grouped:
        assert case.kernel.op == "fprop" and case.kernel.layout == "nhwc"
        assert case.layer.name.endswith(f"_g{case.layer.groups}")
        case.kernel.check_layer(case.layer)                                          # a valid group mode
        assert simulated_sectors(case.layer, case.kernel) <= 400_000_000
    # the grouping is drawn from a generator of its own: without it, every case is the same, and the
    # grouped ones are their dense layer
    monkeypatch.setattr(rc, "_draw_groups", lambda seed, index, layer, kernel, cap: layer)
    plain = random_cases(120, 4)
    for case, other in zip(cases, plain):
        assert case.kernel == other.kernel and case.gpu == other.gpu
        if case.layer.groups == 1:
            assert case.layer == other.layer
        else:
            assert dataclasses.replace(case.layer, k=other.layer.k, groups=1, n=other.layer.n,
                                       name=other.layer.name) == other.layer
