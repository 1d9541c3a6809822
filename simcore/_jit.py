"""The project's ``njit``: ``numba.njit`` whose calls from compiled code compile one specialisation
per argument *type*, not one per constant *value*.

Numba types a constant argument of a call made inside compiled code as a literal
(``Literal[int](0)``, ``Literal[bool](True)``), and a dispatcher compiles (and caches) a separate
specialisation for every combination of literals its callers pass: ``analytic._counts._rows`` was
compiled four times by one ``python -m validation.compare vgg16``, ``simcore._phases._l1_sm`` (about
9 s each on the 2-core development machine) twice, and 27 kernels 2-5 times, about a third of that
command's first-run time. LLVM folds the constants of the calls it inlines anyway, and none of the
project's kernels branch on an argument's literal type, so the specialisations only cost compile
time. The wrapper here makes each dispatcher type a call from compiled code with the arguments'
plain types (``numba.types.unliteral``); calls from Python were never literal. Functions compiled
with ``inline="always"`` are inlined into the caller's IR before typing and are unaffected.

Likewise for arrays' write flags. Numba types a read-only array (``setflags(write=False)``: the model's
memoized tables, the stream plans' cached maps) as another type than a writeable one, and compiles a
separate copy of a kernel for every combination its callers pass, though the machine code is the same
for both: one test-suite run on an empty cache compiled 11 copies of the stream generator
(``traces._generate._generate``, 0.5 MB of machine code each; 4 intended, one per op) and 7 of
``analytic._reuse.l1_configs``: such copies were half the 35 MB of machine code it compiled. The wrapper here makes each dispatcher type its arguments from Python with every array
writeable (within tuples too), so read-only and writeable arrays share one compiled copy. A kernel that
wrote to an array its caller froze would no longer be refused at compile time; the project's kernels
write only to the buffers they are given for output (none frozen).

And one compilation of a kernel's copy across processes: a ``cache=True`` kernel compiles a copy (its
argument types) under an exclusive lock on a file of that copy beside its cache index (``fcntl.flock``,
taken inside Numba's compiler lock), so a second process that needs the same copy waits for the first and
then loads it from the cache instead of compiling it again (other copies of the kernel compile alongside):
the test suite's two processes (pytest-xdist), Dask's worker processes, the first run's background compiles. Locks follow the call graph (a kernel's compile takes its callees' while holding its own), which
has no cycles, so two processes cannot wait on each other.

Use it exactly as ``numba.njit``, with the same options.
"""
from __future__ import annotations

import contextlib
import hashlib
import os

import numba
from numba.core import types
from numba.core.compiler_lock import global_compiler_lock

try:
    import fcntl
except ImportError:                     # not POSIX: every process compiles what it needs
    fcntl = None

#: lock files this process holds (compiles nest: a kernel's callees compile inside its own)
_HELD = set()


def _typed_by_plain_types(dispatcher):
    """Make calls to ``dispatcher`` from compiled code resolve (and compile) on the unliteral types."""
    literal_template = getattr(dispatcher, "get_call_template", None)
    if literal_template is None:             # NUMBA_DISABLE_JIT=1: numba.njit returned the plain function
        return dispatcher

    def get_call_template(args, kws):
        return literal_template(tuple(types.unliteral(a) for a in args),
                                {k: types.unliteral(v) for k, v in kws.items()})

    dispatcher.get_call_template = get_call_template
    # Numba's native dispatch falls back to this method for arguments it cannot type itself (read-only
    # arrays and tuples among them), and so does its compile path (`_compile_for_args`)
    typeof_pyval = dispatcher.typeof_pyval
    dispatcher.typeof_pyval = lambda value: writeable_type(typeof_pyval(value))
    _compile_once(dispatcher)
    return dispatcher


def _compile_once(dispatcher):
    """Make ``dispatcher`` (cache=True) compile under an inter-process lock beside its cache index (module
    docstring); dispatchers without an on-disk cache are left as they are."""
    index = getattr(getattr(getattr(dispatcher, "_cache", None), "_cache_file", None), "_index_path", None)
    if fcntl is None or not index:
        return
    compile_ = dispatcher.compile

    def compile(sig):
        # one lock a copy (the kernel and its argument types): processes compiling other copies of one kernel
        # (the generator of another op) go on side by side. Numba's own lock first, then the file's: the same
        # order in every thread of this process
        path = f"{index}.{hashlib.sha1(str(sig).encode()).hexdigest()[:16]}.lock"
        with global_compiler_lock, _file_lock(path):
            return compile_(sig)        # loads the copy another process saved while this one waited

    dispatcher.compile = compile


@contextlib.contextmanager
def _file_lock(path):
    """An exclusive ``flock`` on ``path`` while the block runs; none where this process holds it already (nested
    compiles), the directory is read-only or the file system has no locks (then compiles go on unlocked, as
    Numba's do)."""
    if path in _HELD:
        yield
        return
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            yield
            return
        _HELD.add(path)
        try:
            yield
        finally:
            _HELD.discard(path)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def writeable_type(numba_type):
    """``numba_type`` with every array in it writeable (arrays in tuples too; other types unchanged)."""
    if isinstance(numba_type, types.Array):
        return numba_type if numba_type.mutable else numba_type.copy(readonly=False)
    if isinstance(numba_type, types.UniTuple):
        return types.UniTuple(writeable_type(numba_type.dtype), numba_type.count)
    if isinstance(numba_type, types.Tuple):
        return types.Tuple([writeable_type(t) for t in numba_type.types])
    return numba_type


def njit(*args, **options):
    """``numba.njit(*args, **options)``, with calls from compiled code typed without literals (see the
    module docstring); a decorator, with or without options, like ``numba.njit``."""
    if len(args) == 1 and callable(args[0]) and not options:
        return _typed_by_plain_types(numba.njit(args[0]))
    if args:
        raise TypeError(f"njit takes options as keywords only, got positional {args!r}")
    return lambda function: _typed_by_plain_types(numba.njit(**options)(function))


# CPU seconds the first ``python -m validation.compare vgg16`` spends (empty Numba cache), measured by
# ``benchmarks/bench_coldstart.py`` on the 2-core development machine (24.2 s, 13.5 s wall; all but
# about 1 s in the two processes that compile the simulator: see ``validation.common.start_first_run``;
# the model compiles nothing on a first run, `analytic._tiers`); the first-run notice divides it by
# the cores those processes can use.
FIRST_RUN_CPU_SECONDS = 24
COMPILING_PROCESSES = 2


def first_run_seconds(cpus=None) -> int:
    """The wall time the first-run notice quotes: ``FIRST_RUN_CPU_SECONDS`` over ``cpus`` (default: this
    machine's count) cores, at most `COMPILING_PROCESSES` (the processes that compile)."""
    if cpus is None:
        cpus = os.cpu_count() or 1
    return -(-FIRST_RUN_CPU_SECONDS // max(1, min(COMPILING_PROCESSES, cpus)))


def is_cached(dispatcher) -> bool:
    """Whether Numba's on-disk cache holds a compiled specialisation of ``dispatcher`` (a ``cache=True``
    kernel) for its current source: one small index file read, no compilation. True where that cannot
    be told (no cache, or a Numba whose cache internals differ): the caller then stays silent."""
    try:
        return bool(dispatcher._cache._cache_file._load_index())
    except (AttributeError, OSError, EOFError, ValueError):
        return True


def compile_notice(dispatchers, stream, what="the simulator", seconds=None) -> bool:
    """Write one line to ``stream`` ("compiling the simulator, first run only, about 12 s"; ``seconds``,
    default `first_run_seconds`) when one of ``dispatchers`` is not in Numba's cache, i.e. when this run
    will compile; return whether it did."""
    if all(is_cached(d) for d in dispatchers):
        return False
    seconds = first_run_seconds() if seconds is None else seconds
    stream.write(f"compiling {what}, first run only, about {seconds} s\n")
    stream.flush()
    return True
