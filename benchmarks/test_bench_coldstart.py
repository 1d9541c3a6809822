"""Smoke tests of bench_coldstart.py's parts (the benchmark itself compiles everything: about a minute)."""
from __future__ import annotations

import os
import sys

from bench_coldstart import ROOT, fresh_copy, timed_run, tracked_files


def test_fresh_copy_holds_the_sources_and_no_compiled_kernels(tmp_path):
    cache = os.path.join(ROOT, "simcore", "__pycache__", "stale.nbi")
    made = not os.path.exists(cache) and os.path.isdir(os.path.dirname(cache))
    if made:
        open(cache, "wb").close()          # a stale index in this tree must not reach the copy
    try:
        tree = fresh_copy(str(tmp_path / "tree"))
    finally:
        if made:
            os.remove(cache)
    files = {os.path.relpath(os.path.join(base, f), tree) for base, _, names in os.walk(tree) for f in names}
    assert {"simcore/_jit.py", "traces/_generate.py", "validation/compare.py", "pyproject.toml"} <= files
    assert not [f for f in files if f.endswith((".nbi", ".nbc", ".pyc"))]
    assert files == set(tracked_files())


def test_timed_run_uses_the_cache_dir_and_the_copy(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "probe.py").write_text("import os, sys\nsys.stderr.write(os.environ['NUMBA_CACHE_DIR'])\n")
    wall, cpu, err = timed_run([sys.executable, "-m", "probe"], str(tree), str(tmp_path / "cache"))
    assert err == str(tmp_path / "cache")
    assert wall > 0 and cpu >= 0
