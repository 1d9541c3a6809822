"""validation.sweep and traces.executor on a real dask.distributed LocalCluster (2 worker processes).

The serial run (``--jobs 1``, in this process) is checked against direct calls of
``traces.simulate_layer`` / ``analytic.predict_layer`` on the scaled GPUs; the cluster runs are checked
against the serial run.
"""
from __future__ import annotations

import functools
import json
import os
import signal
import socket
import threading
import time

import numpy as np
import pytest

pytest.importorskip("distributed")

import simcore  # noqa: E402
from simcore import metrics as M  # noqa: E402
from tests.test_validation import Interrupting  # noqa: E402
from validation import sweep  # noqa: E402
from validation.sweep_results import journal_path, load_sweep  # noqa: E402
from validation.sweep_table import SweepProgress  # noqa: E402

TINY = [{"name": "t3x3", "n": 1, "c": 16, "h": 10, "w": 10, "k": 32, "r": 3, "s": 3, "pad": 1},
        {"name": "t1x1", "n": 1, "c": 8, "h": 6, "w": 6, "k": 16, "r": 1, "s": 1},
        {"name": "t3x3s2", "n": 1, "c": 8, "h": 9, "w": 9, "k": 16, "r": 3, "s": 3, "stride": 2}]
KERNEL_ARGS = ["--tile", "32x32x8", "--threads", "64"]


# ---- task functions shipped to the workers (importable as tests.test_sweep.*) ---------------------
def slow_simulate(delay, layer, gpu, kernel, *, jobs=None):
    time.sleep(delay)
    from traces import simulate_layer
    return simulate_layer(layer, gpu, kernel, jobs=jobs)


def logged_simulate(log, layer, gpu, kernel, *, jobs=None):
    with open(log, "a", encoding="utf-8") as fh:
        fh.write(f"{_identity(layer, gpu)}\n")
    from traces import simulate_layer
    return simulate_layer(layer, gpu, kernel, jobs=jobs)


def deadly_simulate(victim, layer, gpu, kernel, *, jobs=None):
    """Kills the worker process running it when the layer is ``victim``."""
    if layer.name == victim:
        os.kill(os.getpid(), signal.SIGKILL)
    from traces import simulate_layer
    return simulate_layer(layer, gpu, kernel, jobs=jobs)


def _identity(layer, gpu):
    return f"{layer.name}|n{layer.n}|{gpu.name}|{gpu.l2_bytes}"


# ---- fixtures ------------------------------------------------------------------------------------
@pytest.fixture
def layers_file(tmp_path):
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(TINY))
    return str(path)


def _argv(layers_file, out, *extra):
    return [layers_file, "--gpu", "v100", "a100", "--scale", "l2_bytes=2", "--batch", "1", "2",
            *KERNEL_ARGS, "--simulate", "--out", str(out), "--quiet", *extra]


def _comparable(doc):
    """A loaded sweep file without what depends on timing."""
    cases = [{k: v for k, v in case.items() if k != "seconds"} for case in doc["cases"]]
    layers = {k: v.tolist() for k, v in doc["layers"].items() if k != "simulation_seconds"}
    return (doc["config"], doc["complete"], cases, layers,
            {k: v.tolist() for k, v in doc["predicted"].items()},
            {k: v.tolist() for k, v in (doc["simulated"] or {}).items()})


@pytest.fixture(scope="module")
def serial_doc(tmp_path_factory):
    """The serial run (in this process), checked against direct calls."""
    folder = tmp_path_factory.mktemp("serial")
    layers_file = folder / "tiny.json"
    layers_file.write_text(json.dumps(TINY))
    out = folder / "serial.h5"
    assert sweep.main(_argv(str(layers_file), out, "--jobs", "1")) == 0
    assert not os.path.exists(journal_path(out))
    return load_sweep(out)


def _identities(doc) -> list:
    """``_identity`` of every row of a loaded sweep file."""
    return [f"{name}|n{n}|{gpu}|{doc['cases'][case]['gpu_params']['l2_bytes']}"
            for name, n, gpu, case in zip(doc["layers"]["layer"], doc["layers"]["n"], doc["layers"]["gpu"],
                                          doc["layers"]["case"])]


def test_serial_sweep_holds_direct_results(serial_doc):
    import analytic
    from analytic.scaling import scale_gpu
    from traces import ConvLayer, KernelConfig, simulate_layer
    doc = serial_doc
    assert doc["complete"] and len(doc["cases"]) == 8 and all(c["status"] == "done" for c in doc["cases"])
    assert len(doc["layers"]["layer"]) == 24
    kernel = KernelConfig(tile_m=32, tile_n=32, tile_k=8, threads=64)
    for row in (0, 10, 23):
        case = doc["cases"][doc["layers"]["case"][row]]
        gpu = simcore.gpu(case["gpu"])
        if case["scale"]:
            gpu = scale_gpu(gpu, {"l2_bytes": 2.0})
            assert case["gpu_params"]["l2_bytes"] == 2 * simcore.gpu(case["gpu"]).l2_bytes
        layer = ConvLayer(**TINY[doc["layers"]["position"][row]]).with_batch(int(doc["layers"]["batch"][row]))
        assert doc["layers"]["layer"][row] == layer.name and doc["layers"]["n"][row] == layer.n
        sim = simulate_layer(layer, gpu, kernel)
        pred = analytic.predict_layer(layer, gpu, kernel)
        for key in (M.L1_LD_SECTORS, M.L2_RD_SECTORS, M.DRAM_RD_SECTORS, M.DRAM_WR_SECTORS):
            assert doc["simulated"][key][row] == sim[key]
            assert doc["predicted"][key][row] == pred[key]
        assert doc["layers"]["bound"][row] == pred["bound"]


def test_cluster_sweep_equals_serial(cluster, serial_doc, layers_file, tmp_path, capsys):
    out = tmp_path / "dask.h5"
    assert sweep.main(_argv(layers_file, out, "--scheduler", cluster.scheduler.address)) == 0
    assert _comparable(load_sweep(out)) == _comparable(serial_doc)
    table = capsys.readouterr().out.splitlines()
    assert len(table) == 9 and "DRAM rd err" in table[0] and table[1].split()[-1] == "done"


def test_killed_worker_still_completes(cluster, serial_doc, layers_file, tmp_path, monkeypatch):
    monkeypatch.setattr(sweep, "simulate_layer", functools.partial(slow_simulate, 0.3))
    killed = []

    def kill_a_busy_worker():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not killed:
            busy = [addr for addr, keys in cluster.processing().items() if keys]
            if busy:
                time.sleep(0.1)                        # well inside the task's 0.3 s
                pid = cluster.run(os.getpid, workers=[busy[0]])[busy[0]]
                os.kill(pid, signal.SIGKILL)
                killed.append((pid, time.monotonic()))
            time.sleep(0.02)

    killer = threading.Thread(target=kill_a_busy_worker)
    killer.start()
    out = tmp_path / "killed.h5"
    try:
        status = sweep.main(_argv(layers_file, out, "--scheduler", cluster.scheduler.address))
        finished = time.monotonic()
    finally:
        killer.join()
    assert killed and killed[0][1] < finished
    assert status == 0
    assert _comparable(load_sweep(out)) == _comparable(serial_doc)
    cluster.wait_for_workers(2, timeout=60)          # the nanny restarted it, for the next tests


def test_resume_after_interrupt_redoes_nothing(cluster, serial_doc, layers_file, tmp_path, monkeypatch, capsys):
    out = tmp_path / "resumed.h5"
    from traces import simulate_layer
    monkeypatch.setattr(sweep, "simulate_layer", Interrupting(after=7, simulate=simulate_layer))
    assert sweep.main(_argv(layers_file, out, "--jobs", "1")) == 130
    assert "interrupted: 2 of 8 cases done" in capsys.readouterr().err
    first = load_sweep(out)                          # a valid file, marked incomplete
    assert first["complete"] is False and first["error"] == "interrupted"
    done = [c for c in first["cases"] if c["status"] == "done"]
    assert len(done) == 2 and len(first["layers"]["layer"]) == 6
    finished = set(_identities(first))
    assert len(finished) == 6
    with open(journal_path(out), "a", encoding="utf-8") as fh:
        fh.write('{"key": "cut short by a cras')        # Ctrl-C while a line was being written

    log = tmp_path / "calls.log"
    monkeypatch.setattr(sweep, "simulate_layer", functools.partial(logged_simulate, str(log)))
    assert sweep.main(_argv(layers_file, out, "--resume", "--scheduler", cluster.scheduler.address)) == 0
    calls = log.read_text().split()
    assert len(calls) == len(set(calls)) == 24 - 6
    assert not set(calls) & finished and set(calls) | finished == set(_identities(serial_doc))
    assert _comparable(load_sweep(out)) == _comparable(serial_doc)
    assert not os.path.exists(journal_path(out))
    # resuming a finished sweep runs nothing
    log.unlink()
    assert sweep.main(_argv(layers_file, out, "--resume", "--jobs", "1")) == 0
    assert not log.exists()


def test_failed_case_is_recorded_and_the_rest_go_on(layers_file, tmp_path, capsys):
    out = tmp_path / "failed.h5"
    argv = [layers_file, "--gpu", "v100", "--scale", "l1_smem_bytes=0.01", "--scale", "l2_gbps=2", *KERNEL_ARGS,
            "--out", str(out), "--jobs", "1"]
    assert sweep.main(argv) == 1
    captured = capsys.readouterr()
    assert "1 of 3 cases failed" in captured.err
    doc = load_sweep(out)
    assert doc["complete"] is True
    assert [c["status"] for c in doc["cases"]] == ["done", "failed", "done"]
    assert "does not fit" in doc["cases"][1]["error"] and "FAILED" in captured.out
    assert sorted(set(doc["layers"]["case"].tolist())) == [0, 2]
    assert doc["simulated"] is None                  # analytic only


def test_case_whose_workers_keep_dying_fails_and_the_rest_go_on(cluster, layers_file, tmp_path, monkeypatch):
    other = tmp_path / "other.json"
    other.write_text(json.dumps(TINY[:1]))
    monkeypatch.setattr(sweep, "simulate_layer", functools.partial(deadly_simulate, "t1x1"))
    out = tmp_path / "deadly.h5"
    assert sweep.main([layers_file, str(other), *KERNEL_ARGS, "--simulate", "--out", str(out), "--quiet",
                       "--scheduler", cluster.scheduler.address]) == 1
    doc = load_sweep(out)
    assert [c["network"] for c in doc["cases"]] == ["tiny", "other"]
    assert [c["status"] for c in doc["cases"]] == ["failed", "done"]
    assert doc["cases"][0]["error"].startswith("KilledWorker")
    assert doc["layers"]["layer"].tolist() == ["t3x3"]
    cluster.wait_for_workers(2, timeout=60)


def test_task_error_is_recorded(cluster, layers_file, tmp_path, monkeypatch):
    def broken(layer, gpu, kernel, factors=None):
        raise ValueError(f"model refuses {layer.name}")
    monkeypatch.setattr(sweep, "predict_layer", broken)   # local: pickled by value
    out = tmp_path / "broken.h5"
    assert sweep.main([layers_file, "--gpu", "v100", "a100", *KERNEL_ARGS, "--out", str(out), "--quiet",
                       "--scheduler", cluster.scheduler.address]) == 1
    doc = load_sweep(out)
    assert [c["status"] for c in doc["cases"]] == ["failed", "failed"]
    assert doc["cases"][0]["error"] == "ValueError: model refuses t3x3"


# ---- bad input -----------------------------------------------------------------------------------
def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("extra, message", [
    (["--gpu", "v101"], "unknown GPU 'v101'"),
    (["--scale", "l2_bytes"], "--scale item must look like FIELD=FACTOR"),
    (["--scale", "l3_bytes=2"], "unknown GPU field 'l3_bytes'"),
    (["--scale", "sms=two"], "factor of sms must be a number"),
    (["--scheduler", "tcp://127.0.0.1:{port}"], "cannot reach the scheduler"),
    (["--scheduler", "http://127.0.0.1:80"], "expected tcp://HOST:PORT"),
    (["--scheduler", "tcp://127.0.0.1:1", "--jobs", "2"], "not both"),
    (["--resume"], "--resume needs --out"),
    (["--out", "{tmp}/r.json"], "give a name ending in .h5"),
    (["--out", "{tmp}/exists.h5"], "give --resume to continue"),
    (["--out", "{tmp}/exists.h5", "--resume"], "exists.h5: corrupt or truncated sweep results file"),
    (["--batch", "0"], "--batch"),
    (["vgg17"], "unknown network 'vgg17'"),
])
def test_bad_input_one_line_exit_2(layers_file, tmp_path, capsys, extra, message):
    (tmp_path / "exists.h5").write_bytes(b"")
    extra = [a.replace("{port}", str(_free_port())).replace("{tmp}", str(tmp_path)) for a in extra]
    before = set(os.listdir(tmp_path))
    start = time.monotonic()
    assert sweep.main([layers_file, *extra]) == 2
    assert time.monotonic() - start < 10
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and message in err, err
    assert set(os.listdir(tmp_path)) == before


def test_resume_refuses_a_file_of_another_configuration(layers_file, tmp_path, capsys):
    out = tmp_path / "r.h5"
    assert sweep.main([layers_file, *KERNEL_ARGS, "--jobs", "1", "--quiet", "--out", str(out)]) == 0
    before = out.read_bytes()
    assert sweep.main([layers_file, *KERNEL_ARGS, "--jobs", "1", "--out", str(out), "--resume", "--simulate"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --resume: ") and "another kernel, --factors or --simulate" in err
    assert out.read_bytes() == before and not os.path.exists(journal_path(out))


def test_unreachable_scheduler_from_environment(layers_file, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", f"tcp://127.0.0.1:{_free_port()}")
    out = tmp_path / "r.h5"
    assert sweep.main([layers_file, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: DASK_SCHEDULER_ADDRESS tcp://127.0.0.1:") and "cannot reach" in err
    assert not out.exists()
    # --jobs 1 runs in this process and ignores the variable
    assert sweep.main([layers_file, "--jobs", "1", "--quiet", *KERNEL_ARGS, "--out", str(out)]) == 0


# ---- results files and progress ------------------------------------------------------------------
def test_progress_shows_cases_layers_and_time_left():
    import io
    stream = io.StringIO()
    progress = SweepProgress(100.0, cases=4, layers=12, file=stream, force=True)
    progress.advance(25.0, cases=1, layers=3)
    progress.advance(25.0, cases=1, layers=3, failed=1)
    progress.close()
    text = stream.getvalue().replace("\r", "\n").splitlines()[-1]
    assert "50%" in text and "cases 2/4, layers 6/12, 1 failed" in text and "<" in text


def test_numbers_are_exact_integers(serial_doc):
    assert serial_doc["simulated"][M.L1_LD_SECTORS].dtype == np.int64
    assert (serial_doc["simulated"][M.L1_LD_SECTORS] > 0).all()


def test_ctrl_c_in_a_terminal_leaves_a_valid_file(tmp_path):
    """SIGINT to the whole process group (what Ctrl-C in a terminal sends) while the default local
    cluster runs: exit status 130, no traceback from the workers, a valid file with the finished cases."""
    import subprocess
    import sys
    out, layers = tmp_path / "ctrl_c.h5", tmp_path / "medium.json"
    layers.write_text(json.dumps([{"n": 1, "c": 256, "h": 28, "w": 28, "k": 256, "r": 3, "s": 3, "pad": 1},
                                  {"n": 1, "c": 128, "h": 56, "w": 56, "k": 128, "r": 3, "s": 3, "pad": 1},
                                  {"n": 1, "c": 64, "h": 112, "w": 112, "k": 64, "r": 3, "s": 3, "pad": 1}]))
    argv = [sys.executable, "-m", "validation.sweep", str(layers), "--gpu", "v100", "a100", "--scale", "l2_bytes=2",
            "--scale", "sms=2", "--scale", "dram_gbps=2", "--batch", "1", "2", "--simulate", "--out", str(out),
            "--jobs", "2"]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    process = subprocess.Popen(argv, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None:
            if os.path.exists(journal_path(out)) and len(open(journal_path(out)).readlines()) >= 2:
                break                                       # the header and one finished case
            time.sleep(0.05)
        assert process.poll() is None, "the sweep ended before it could be interrupted"
        os.killpg(process.pid, signal.SIGINT)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr and "interrupted:" in stderr, stderr
    doc = load_sweep(out)
    assert doc["complete"] is False and doc["error"] == "interrupted"
    done = [c for c in doc["cases"] if c["status"] == "done"]
    assert 1 <= len(done) < 16 and len(doc["layers"]["layer"]) == 3 * len(done)
    assert "not run" in stdout


def test_records_round_trip_through_journal_and_file(tmp_path):
    from traces import ConvLayer
    from validation.sweep_results import (append_journal, make_record, read_journal, records_of, write_journal,
                                          write_sweep)
    layers = [ConvLayer(1, 8, 6, 6, 16, 3, 3, pad=1, name="a"), ConvLayer(2, 16, 4, 4, 8, 1, 1, stride=2, name="b")]
    params = {"key": "k1", "network": "net", "gpu": "v100", "scale": "sms=2", "batch": 1, "gpu_params": {"sms": 160}}
    predicted = [{"time_s": 1e-6, "ai_dram": float("inf"), "bound": "dram"},
                 {"time_s": 2e-6, "ai_dram": 3.5, "bound": "l2"}]
    simulated = [{M.DRAM_RD_SECTORS: 7, M.L2_RD_SECTORS: 9}, {M.DRAM_RD_SECTORS: 2 ** 40, M.L2_RD_SECTORS: 0}]
    done = make_record(params, layers=layers, predicted=predicted, simulated=simulated,
                       simulation_seconds=[0.5, None], seconds=1.5)
    failed = make_record({**params, "key": "k2"}, status="failed", error="ValueError: no")
    journal, out = tmp_path / "j.journal", tmp_path / "r.h5"
    write_journal(journal, {"simulate": True}, [done])
    append_journal(journal, failed)
    config, records = read_journal(journal)
    write_sweep(out, config, records, complete=True)
    for record in (records[0], records_of(load_sweep(out))[0]):
        assert record["layers"] == ["a", "b"] and record["shapes"][1].tolist() == [2, 16, 4, 4, 8, 1, 1, 2, 2, 0, 0,
                                                                                  1, 1, 1]
        assert record["predicted"][0, record["predicted_keys"].index("ai_dram")] == float("inf")
        assert record["simulated"][1, record["simulated_keys"].index(M.DRAM_RD_SECTORS)] == 2 ** 40
        assert record["predicted_text"]["bound"] == ["dram", "l2"] and record["simulation_seconds"] == [0.5, None]
    doc = load_sweep(out)
    assert [c["status"] for c in doc["cases"]] == ["done", "failed"] and doc["cases"][1]["error"] == "ValueError: no"
    assert doc["cases"][0]["summary"]["bound"] == "l2" and doc["cases"][0]["summary"]["time_s"] == pytest.approx(3e-6)


def test_cache_dir_is_filled_and_read_back(serial_doc, layers_file, tmp_path, monkeypatch):
    """--cache-dir: a simulated sweep writes one entry per distinct simulation (readable with
    traces.simcache.read_cache), and a second sweep with the same cache simulates nothing and gives
    the same results."""
    from traces.simcache import read_cache
    cache = tmp_path / "cache"
    cache.mkdir()
    out = tmp_path / "first.h5"
    assert sweep.main(_argv(layers_file, out, "--jobs", "1", "--cache-dir", str(cache))) == 0
    entries = sorted(p.stem for p in cache.iterdir())
    assert entries and all(read_cache(str(cache), key) is not None for key in entries)
    assert _comparable(load_sweep(out)) == _comparable(serial_doc)

    def no_simulation(*args, **kwargs):
        raise AssertionError("simulated although every layer is in the cache")
    monkeypatch.setattr(sweep, "simulate_layer", no_simulation)
    again = tmp_path / "again.h5"
    assert sweep.main(_argv(layers_file, again, "--jobs", "1", "--cache-dir", str(cache))) == 0
    assert _comparable(load_sweep(again)) == _comparable(serial_doc)
