"""traces.executor: in this process and on a real LocalCluster (the session's ``cluster``), and the
validation CLIs on it."""
from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("distributed")

from validation import compare, sweep  # noqa: E402
import traces.simcache  # noqa: E402
from traces.executor import run_cases  # noqa: E402
from validation.sweep_results import journal_path  # noqa: E402

TINY = [{"name": "t3x3", "n": 1, "c": 16, "h": 10, "w": 10, "k": 32, "r": 3, "s": 3, "pad": 1},
        {"name": "t1x1", "n": 1, "c": 8, "h": 6, "w": 6, "k": 16, "r": 1, "s": 1}]
KERNEL_ARGS = ["--tile", "32x32x8", "--threads", "64"]


def square(x):
    return x * x


def fail_on_three(x):
    if x == 3:
        raise ValueError("three")
    return x


@pytest.fixture
def layers_file(tmp_path):
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(TINY))
    return str(path)


def test_run_cases_in_process_and_on_cluster(cluster):
    for scheduler in (None, cluster.scheduler.address):
        done, errors = {}, {}
        run_cases(fail_on_three, [((i,), {}) for i in range(6)], scheduler=scheduler,
                  on_done=done.__setitem__, on_error=lambda i, e: errors.__setitem__(i, str(e)))
        assert done == {0: 0, 1: 1, 2: 2, 4: 4, 5: 5} and errors == {3: "three"}
        with pytest.raises(ValueError, match="three"):
            run_cases(fail_on_three, [((i,), {}) for i in range(6)], scheduler=scheduler)
    results = {}
    run_cases(square, [((i,), {}) for i in range(5)], scheduler=cluster.scheduler.address,
              on_done=results.__setitem__)
    assert results == {i: i * i for i in range(5)}


def test_compare_on_cluster_with_client_side_cache(cluster, layers_file, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    assert compare.main(["--layers-file", layers_file, *KERNEL_ARGS, "--quiet", "--json", str(one)]) == 0
    assert compare.main(["--layers-file", layers_file, *KERNEL_ARGS, "--quiet", "--json", str(two),
                         "--scheduler", cluster.scheduler.address, "--cache-dir", str(cache)]) == 0
    a, b = (json.loads(p.read_text()) for p in (one, two))
    assert [e["simulated"] for e in a["layers"]] == [e["simulated"] for e in b["layers"]]
    assert len(os.listdir(cache)) == 2


def test_worker_of_another_version_is_refused(cluster, layers_file, tmp_path, capsys, monkeypatch):
    installed = traces.simcache.package_version()
    monkeypatch.setattr(traces.simcache, "package_version", lambda: "0.0.0-other")   # this client only
    out = tmp_path / "r.h5"
    assert sweep.main([layers_file, "--out", str(out), "--scheduler", cluster.scheduler.address]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --scheduler tcp://") and f"runs deltasim {installed}" in err
    assert "0.0.0-other" in err and not out.exists() and not os.path.exists(journal_path(out))


def _saturation(dask_scheduler):
    return dask_scheduler.WORKER_SATURATION


def test_local_cluster_hands_each_worker_one_task_at_a_time(cluster):
    # with Dask's default 1.1 a one-thread worker holds two tasks, and a task that kills its worker gives
    # the one queued behind it a strike towards KilledWorker
    assert cluster.run_on_scheduler(_saturation) == 1.0


WORKER_NUMBA_SCRIPT = """
import json, os
import numba  # the client's main module imports Numba, as `python -m validation.accuracy` does
from distributed import Client
from traces.executor import local_cluster


def threads():
    import numba
    return os.environ.get("NUMBA_NUM_THREADS"), numba.config.NUMBA_NUM_THREADS


if __name__ == "__main__":
    with local_cluster(1) as cluster, Client(cluster) as client:
        print(json.dumps(sorted(client.run(threads).values())))
"""


def test_local_workers_numba_agrees_with_their_environment(tmp_path):
    # A worker process re-imports the client's main module before Dask sets its environment, so Numba
    # first read the core count; its first compile then re-read NUMBA_NUM_THREADS=1 after the thread
    # pool had started and raised RuntimeError (`accuracy --jobs 2` on a fresh install). Run as a
    # script: the effect needs a main module that imports Numba, which pytest's is not.
    import subprocess
    import sys
    script = tmp_path / "client.py"
    script.write_text(WORKER_NUMBA_SCRIPT)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "NUMBA_NUM_THREADS": "2"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [["1", 1]]
