"""validation.calibrate: the optimiser and the CLI on synthetic data (fake simulate/predict)."""
from __future__ import annotations

import dataclasses
import json
import math

import pytest

from simcore import metrics as M
from validation import calibrate

TRUE = {"alpha": 0.37, "beta": 2.4}


@dataclasses.dataclass(frozen=True)
class Factors:
    alpha: float = 0.5
    beta: float = 1.0
    gamma: float = 3.0          # not in BOUNDS: never fitted
    BOUNDS = {"alpha": (0.05, 1.0), "beta": (0.5, 8.0)}

    def to_dict(self):
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d):
        return cls(**d)

    @classmethod
    def load(cls, path):
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        if data.get("format") != "test-factors":
            raise ValueError(f"{path}: not a factors file")
        return cls.from_dict(data["factors"])

    def save(self, path):
        with open(path, "w", encoding="utf-8") as fh:
            json.dump({"format": "test-factors", "factors": self.to_dict()}, fh)


def _model(layer, alpha, beta):
    base = float(layer.gemm_m * layer.gemm_k) / 8.0
    out = {key: 0.0 for key in M.all_keys()}
    out[M.L1_LD_SECTORS] = base
    out[M.L1_LD_MISSES] = base * alpha
    out[M.L2_RD_SECTORS] = base * alpha
    out[M.DRAM_RD_SECTORS] = layer.params * beta + 0.05 * base * alpha
    out[M.DRAM_WR_SECTORS] = layer.output_elements / 8.0
    return out


SIM_CALLS = []


def fake_simulate(layer, gpu, kernel, *, jobs=None):
    shape = {k: v for k, v in layer.as_dict().items() if k != "name"}
    SIM_CALLS.append((json.dumps(shape, sort_keys=True), gpu.name))
    return {key: int(round(value)) for key, value in _model(layer, **TRUE).items()}


def fake_predict(layer, gpu, kernel, factors=None):
    factors = factors or Factors()
    out = _model(layer, factors.alpha, factors.beta)
    out.update(time_s=1e-6, bound="dram", flops=float(layer.flops))
    return out


def failing_simulate(layer, gpu, kernel, *, jobs=None):
    raise AssertionError("should have come from the cache")


@pytest.fixture
def fakes(monkeypatch):
    SIM_CALLS.clear()
    monkeypatch.setattr(calibrate, "simulate_layer", fake_simulate)
    monkeypatch.setattr(calibrate, "predict_layer", fake_predict)
    monkeypatch.setattr(calibrate, "reuse_factors_class", lambda: Factors)
    return monkeypatch


def test_coordinate_descent_bounded_quadratic():
    def f(x):
        return (x["a"] - 0.3) ** 2 + 3 * (x["b"] + 1.7) ** 2 + 0.5 * (x["a"] - 0.3) * (x["b"] + 1.7)
    x, fx, evaluations = calibrate.coordinate_descent(f, {"a": 0.9, "b": 0.0}, {"a": (0.0, 1.0), "b": (-5.0, 5.0)},
                                                      sweeps=30)
    assert x["a"] == pytest.approx(0.3, abs=1e-4) and x["b"] == pytest.approx(-1.7, abs=1e-4)
    # the minimum outside the box lands on the bound
    x, _, _ = calibrate.coordinate_descent(lambda x: (x["a"] - 5) ** 2, {"a": 0.5}, {"a": (0.0, 1.0)})
    assert x["a"] == pytest.approx(1.0, abs=1e-6)


def test_calibrate_recovers_known_factors(fakes, tmp_path, capsys):
    out = tmp_path / "factors.json"
    cache = tmp_path / "cache"
    cache.mkdir()
    argv = ["alexnet", "googlenet", "--gpu", "v100", "a100", "--batch", "1", "2", "--holdout", "vgg16",
            "--cache-dir", str(cache), "-o", str(out), "--quiet"]
    assert calibrate.main(argv) == 0
    fitted = Factors.load(out)
    assert fitted.alpha == pytest.approx(TRUE["alpha"], rel=2e-3)
    assert fitted.beta == pytest.approx(TRUE["beta"], rel=2e-3)
    assert fitted.gamma == 3.0
    text = capsys.readouterr().out
    assert "fit set: |relative error| per metric" in text and "held-out set" in text
    assert "dram_read" in text and "factors written to" in text
    # identical layer shapes are simulated once per run (googlenet/alexnet x 2 GPUs x 2 batches + vgg16)
    assert len(SIM_CALLS) == len(set(SIM_CALLS))
    first = len(SIM_CALLS)
    assert first < (5 + 57 + 13) * 4 and len(list(cache.iterdir())) == first
    # a second run reads every simulation from the cache
    fakes.setattr(calibrate, "simulate_layer", failing_simulate)
    out2 = tmp_path / "factors2.json"
    assert calibrate.main(argv[:-3] + ["-o", str(out2), "--quiet", "--objective", "rel"]) == 0
    fitted2 = Factors.load(out2)
    assert fitted2.alpha == pytest.approx(TRUE["alpha"], rel=2e-3)
    assert first > 0


def test_calibrate_fields_and_init(fakes, tmp_path):
    init = tmp_path / "init.json"
    Factors(alpha=0.9, beta=TRUE["beta"]).save(init)
    out = tmp_path / "f.json"
    assert calibrate.main(["alexnet", "--init", str(init), "--fields", "alpha", "--metrics", "l2_read",
                           "-o", str(out), "--quiet"]) == 0
    fitted = Factors.load(out)
    assert fitted.alpha == pytest.approx(TRUE["alpha"], rel=2e-3) and fitted.beta == TRUE["beta"]


def test_error_stats_worst_case(fakes):
    from traces.networks import network
    import simcore
    from traces import KernelConfig
    gpu, kernel = simcore.gpu("v100"), KernelConfig()
    cases = [(layer.name, layer, gpu) for layer in network("alexnet")]
    sims = [fake_simulate(layer, gpu, kernel) for _, layer, gpu in cases]
    stats = calibrate.error_stats(cases, sims, Factors(alpha=TRUE["alpha"] * 1.1, beta=TRUE["beta"]),
                                  [M.L2_RD_SECTORS], kernel)
    assert stats[M.L2_RD_SECTORS]["mean_abs"] == pytest.approx(0.1, abs=1e-3)
    assert math.isfinite(stats[M.L2_RD_SECTORS]["worst_abs"])


@pytest.mark.parametrize("argv, message", [
    (["resnet51"], "unknown network 'resnet51'"),
    (["alexnet", "--holdout", "lenet"], "unknown network 'lenet'"),
    (["alexnet", "--gpu", "v100", "x1"], "unknown GPU 'x1'"),
    (["alexnet", "--metrics", "l3_read"], "unknown metric 'l3_read'"),
    (["alexnet", "--tile", "8x8"], "tile must look like MxNxK"),
    (["alexnet", "--fields", "gamma"], "unknown or unbounded field(s) gamma"),
    (["alexnet", "--init", "{tmp}/missing.json"], "file not found"),
    (["alexnet", "--batch", "0"], "--batch"),
])
def test_calibrate_bad_input(fakes, tmp_path, capsys, argv, message):
    out = tmp_path / "f.json"
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert calibrate.main(argv + ["-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and message in err, err
    assert not out.exists() and SIM_CALLS == []


def test_calibrate_output_dir_missing(fakes, tmp_path, capsys):
    assert calibrate.main(["alexnet", "-o", str(tmp_path / "no" / "f.json")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_calibrate_real_model_tiny_layers(tmp_path, capsys):
    analytic = pytest.importorskip("analytic")
    if not hasattr(analytic, "predict_layer") or not hasattr(analytic, "ReuseFactors"):
        pytest.skip("analytic.predict_layer not available yet")
    layers = tmp_path / "tiny.json"
    layers.write_text(json.dumps([
        {"name": "a", "n": 1, "c": 16, "h": 12, "w": 12, "k": 32, "r": 3, "s": 3, "pad": 1},
        {"name": "b", "n": 2, "c": 32, "h": 8, "w": 8, "k": 64, "r": 1, "s": 1}]))
    out = tmp_path / "factors.json"
    assert calibrate.main([str(layers), "--fields", "l2_capacity,l1_tile_edge", "--sweeps", "1",
                           "--holdout", str(layers), "--cache-dir", str(tmp_path), "-o", str(out), "--quiet"]) == 0
    fitted = analytic.ReuseFactors.load(out)
    assert isinstance(fitted, analytic.ReuseFactors)
    text = capsys.readouterr().out
    before, after = (float(v) for v in text.split("objective (log) ")[1].split(" in ")[0].split(" -> "))
    assert after <= before
