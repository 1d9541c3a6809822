"""The first-run notice (``simcore._jit.compile_notice``) and the project's ``njit`` (one compiled
specialisation per argument type, whatever constants the callers pass and whatever arrays' write flags)."""
from __future__ import annotations

import importlib.util
import io

from simcore._jit import FIRST_RUN_CPU_SECONDS, compile_notice, first_run_seconds, is_cached

KERNELS = '''
from simcore._jit import njit


@njit(cache=True)
def scale(x, k):
    return x * k


@njit(cache=True)
def callers(x):
    return scale(x, 2) + scale(x, 3) + scale(x, x) + scale(x, True)


@njit(cache=True)
def total(a, pair):
    return a.sum() + pair[0].sum() + pair[1][-1]
'''


def _load(tmp_path, name):
    """A fresh module of ``cache=True`` kernels in ``tmp_path`` (its Numba cache starts empty)."""
    path = tmp_path / f"{name}.py"
    path.write_text(KERNELS)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_notice_only_while_the_cache_is_cold(tmp_path):
    module = _load(tmp_path, "first_run_kernels")
    assert not is_cached(module.callers)
    first = io.StringIO()
    assert compile_notice([module.callers], first, what="the test kernels", seconds=7)
    assert first.getvalue() == "compiling the test kernels, first run only, about 7 s\n"
    assert module.callers(5) == 10 + 15 + 25 + 5
    assert is_cached(module.callers) and is_cached(module.scale)
    again = io.StringIO()
    assert not compile_notice([module.callers], again)
    assert again.getvalue() == ""
    # one kernel of several still cold: the notice again
    assert compile_notice([module.callers, _load(tmp_path, "other_kernels").callers], io.StringIO())


def test_constants_passed_from_compiled_code_share_one_specialisation(tmp_path):
    module = _load(tmp_path, "literal_kernels")
    assert module.callers(4) == 8 + 12 + 16 + 4
    # 2, 3 and x are one int64 specialisation; True is a bool (a type of its own), not Literal[bool]
    assert sorted(str(sig) for sig in module.scale.signatures) == ["(int64, bool)", "(int64, int64)"]


def test_read_only_and_writeable_arrays_share_one_specialisation(tmp_path):
    import numpy as np
    from numba.core import types
    module = _load(tmp_path, "write_flag_kernels")

    def frozen(array):
        array = array.copy()
        array.setflags(write=False)
        return array

    a, i, f = np.arange(5.0), np.arange(3), np.arange(4.0)
    want = a.sum() + i.sum() + f[-1]
    for args in ((a, (i, f)), (frozen(a), (frozen(i), f)), (a, (i, frozen(f))), (frozen(a), (frozen(i), frozen(f)))):
        assert module.total(*args) == want
    assert len(module.total.signatures) == 1
    (sig,) = module.total.signatures
    assert sig[0] == types.float64[::1] and sig[1] == types.Tuple((types.int64[::1], types.float64[::1]))
    # read-only arrays still read right through the shared copy (not zeros or another buffer)
    assert module.total(frozen(a * 2), (frozen(i * 3), frozen(f + 1))) == 2 * a.sum() + 3 * i.sum() + f[-1] + 1


def test_compare_says_so_only_when_it_compiles(tmp_path, capsys):
    from simcore._phases import _l1_sm
    from traces._generate import _generate
    from validation import compare
    cold = not all(is_cached(k) for k in (_l1_sm, _generate))
    layers = tmp_path / "layers.json"
    layers.write_text('[{"n": 1, "c": 8, "h": 6, "w": 6, "k": 8, "r": 3, "s": 3, "pad": 1, "name": "tiny"}]')
    assert compare.main([str(layers), "--quiet"]) == 0
    err = capsys.readouterr().err
    noticed = "compiling the simulator, first run only" in err
    # never said over a warm cache; said over a cold one unless another process (the suite runs in two, -n 2)
    # compiled the kernels between the check above and the command's own
    assert noticed <= cold
    assert noticed or not cold or all(is_cached(k) for k in (_l1_sm, _generate))
    assert compare.main([str(layers), "--quiet"]) == 0
    assert "compiling" not in capsys.readouterr().err


def test_the_notice_quotes_the_cpu_time_over_the_compiling_processes(tmp_path):
    assert first_run_seconds(1) == FIRST_RUN_CPU_SECONDS
    assert first_run_seconds(2) == first_run_seconds(3) == first_run_seconds(64) == -(-FIRST_RUN_CPU_SECONDS // 2)
    line = io.StringIO()
    assert compile_notice([_load(tmp_path, "cold_kernels").callers], line)
    assert line.getvalue() == f"compiling the simulator, first run only, about {first_run_seconds()} s\n"


def test_background_compile_parts_compile_what_the_run_needs():
    import pytest
    from numba.core import types
    from simcore._phases import _l1_phase_parallel, _l1_phase_serial
    from traces._generate import _generate
    from traces.simulate import _compile_kernels
    _compile_kernels("hierarchy", l1_variant=(None, 1))          # the generic L1 loop (any geometry)
    for phase in (_l1_phase_serial, _l1_phase_parallel):
        assert any(sig[-2:] == (types.none, types.int64) for sig in phase.signatures)
    _compile_kernels("stream", ops=("wgrad",))                    # wgrad's generator: (dgrad, wgrad) = (None, 1)
    # the generator's last three arguments are (dgrad, wgrad, grouped): (None, 1, None) for a dense wgrad (the
    # test checked the last two, which a grouped fprop stream, (None, None, 1), also ends with: it passed only
    # after a test that simulated a grouped layer in the same process)
    assert any(sig[-3:] == (types.none, types.int64, types.none) for sig in _generate.signatures)
    with pytest.raises(ValueError, match="part"):
        _compile_kernels("everything")


def test_processes_that_need_one_kernel_compile_it_once(tmp_path):
    """Two processes that call a cold ``cache=True`` kernel at the same time: one compiles it under the lock
    beside its cache index, the other waits and loads that copy (Numba's own counts: one cache miss, one hit)."""
    import os
    import subprocess
    import sys
    import time
    (tmp_path / "shared_kernels.py").write_text(KERNELS)
    code = ("import sys, time; sys.path.insert(0, sys.argv[1]); import shared_kernels as m; "
            "t = float(sys.argv[2]); time.sleep(max(0.0, t - time.time())); m.callers(3); "
            "print(sum(m.callers.stats.cache_misses.values()), sum(m.callers.stats.cache_hits.values()))")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (os.getcwd(), os.environ.get("PYTHONPATH")))))
    start = time.time() + 4.0                 # both processes past their imports, then both call at once
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path), str(start)], stdout=subprocess.PIPE,
                              text=True, env=env) for _ in range(2)]
    counts = sorted(tuple(map(int, p.communicate(timeout=300)[0].split())) for p in procs)
    assert all(p.returncode == 0 for p in procs)
    assert counts == [(0, 1), (1, 0)]         # (misses, hits): one compiled, the other loaded its copy
