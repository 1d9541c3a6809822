"""One executor for the parallel work of every CLI (validation's and `analytic.scaling --check`): this process, a local Dask cluster, or a running one.

    run_cases(fn, tasks)                                  # in this process, in order (dask not imported)
    run_cases(fn, tasks, jobs=2)                          # a LocalCluster of 2 worker processes, 1 thread each
    run_cases(fn, tasks, scheduler="tcp://host:8786")     # a running cluster (dask scheduler + dask worker,
                                                          #   dask-jobqueue, ...)
    with Executor(jobs=2) as ex:                          # one cluster for several batches of tasks
        ex.run(fn, tasks_a, on_done=...)
        ex.run(fn, tasks_b, on_done=...)

Each task is ``(args, kwargs)`` and runs ``fn(*args, **kwargs)``. On a cluster, ``fn`` and the
arguments travel by pickle (cloudpickle): a module-level function goes by reference, so the package
must be importable on every worker (the same deltasim installed there); dataclasses such as a
hypothetical ``simcore.GPU`` go as data. Results come back to the calling process, where
``on_done(index, result)`` runs as each task finishes: files are written by the caller only, and
nothing assumes that the workers share its disk.

Local workers get ``NUMBA_NUM_THREADS=1``: one simulation per process, one process per core. Each
worker process compiles Numba's kernels into, or loads them from, its own ``__pycache__`` (or Numba's
per-user cache when that folder is not writable), so the first task on a fresh worker takes longer.

The scheduler address is ``--scheduler`` or, when neither ``--scheduler`` nor ``--jobs`` is given, the
``DASK_SCHEDULER_ADDRESS`` environment variable (the variable Dask itself reads).
"""
from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import signal
import socket
import sys
import threading
import time
import urllib.parse


class CLIError(ValueError):
    """Bad executor options (a ValueError: every CLI reports it as one ``error: ...`` line, exit 2)."""


def parse_positive_int(text: str) -> int:
    """argparse type: a positive integer."""
    import argparse
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value

__all__ = ["ENV_SCHEDULER", "Executor", "run_cases", "timed_call", "add_executor_arguments",
           "resolve_executor", "check_scheduler", "local_cores", "local_cluster"]

ENV_SCHEDULER = "DASK_SCHEDULER_ADDRESS"
#: Seconds to wait for the scheduler's port to answer before reporting it unreachable.
PROBE_TIMEOUT_S = 5.0
#: Seconds the Dask client may take to connect once the port answered.
CONNECT_TIMEOUT_S = 30.0
_INSTALL_HINT = "pip install 'deltasim[sweep]'"


def local_cores() -> int:
    """Cores this process may run on (the default size of a local cluster)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def timed_call(fn, *args, **kwargs):
    """``(fn(*args, **kwargs), seconds)``: the task's own time, measured where it runs."""
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - start


# ---- command-line options ------------------------------------------------------------------------
def add_executor_arguments(parser, *, default_jobs: str = "1: in this process") -> None:
    """``--jobs N`` and ``--scheduler ADDRESS`` (see `resolve_executor`)."""
    group = parser.add_argument_group("parallel runs (Dask)")
    group.add_argument("--jobs", type=parse_positive_int, default=None, metavar="N",
                       help=f"run N tasks at once on a local Dask cluster of N worker processes, one "
                            f"thread each (default {default_jobs}; 1 runs in this process, without Dask)")
    group.add_argument("--scheduler", metavar="ADDRESS", default=None,
                       help=f"run the tasks on a running Dask cluster, e.g. tcp://HOST:8786 (default: "
                            f"${ENV_SCHEDULER} when set and --jobs is not given)")


def resolve_executor(args, *, default_jobs: int = 1) -> None:
    """Check ``args.jobs`` / ``args.scheduler`` and settle them (CLIError: one clear line).

    Afterwards ``args.scheduler`` is an address or None and ``args.jobs`` the local worker count
    (1 = in this process; ignored with a scheduler). Dask must be importable and the scheduler's port
    must answer (within `PROBE_TIMEOUT_S`) when they are needed.
    """
    jobs, scheduler = getattr(args, "jobs", None), getattr(args, "scheduler", None)
    if scheduler is not None and jobs is not None:
        raise CLIError("give --jobs (a local cluster) or --scheduler (a running one), not both")
    option = "--scheduler"
    if scheduler is None and jobs is None and os.environ.get(ENV_SCHEDULER, "").strip():
        scheduler, option = os.environ[ENV_SCHEDULER].strip(), ENV_SCHEDULER
    args.jobs = default_jobs if jobs is None else jobs
    args.scheduler = None
    if scheduler is not None:
        _check_dask(option)
        args.scheduler = check_scheduler(scheduler, option)
    elif args.jobs > 1:
        _check_dask(f"--jobs {args.jobs}")


def _check_dask(option: str) -> None:
    if importlib.util.find_spec("distributed") is None:
        raise CLIError(f"{option} needs dask.distributed, which is not installed ({_INSTALL_HINT})")


def check_scheduler(address: str, option: str = "--scheduler") -> str:
    """The address, once its host resolves and its port accepts a connection; else CLIError."""
    text = str(address).strip()
    parsed = urllib.parse.urlsplit(text if "://" in text else f"tcp://{text}")
    if parsed.scheme not in ("tcp", "tls"):
        raise CLIError(f"{option} {text}: expected tcp://HOST:PORT or tls://HOST:PORT")
    try:
        host, port = parsed.hostname, parsed.port
    except ValueError:
        host, port = None, None
    if not host or port is None:
        raise CLIError(f"{option} {text}: expected tcp://HOST:PORT or tls://HOST:PORT")
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S):
            pass
    except OSError as err:
        reason = "timed out" if isinstance(err, socket.timeout) else (err.strerror or str(err))
        raise CLIError(f"{option} {text}: cannot reach the scheduler: {reason}") from None
    return f"{parsed.scheme}://{parsed.netloc}"


# ---- the executor --------------------------------------------------------------------------------
def _apply(fn, args, kwargs):
    return fn(*args, **kwargs)


def local_cluster(workers: int):
    """The ``distributed.LocalCluster`` of ``--jobs``: ``workers`` processes, one thread and one Numba
    thread each, no dashboard (the scheduler's HTTP routes on a free port, not on 8787, which another
    cluster may hold), workers that ignore Ctrl-C (`dask_setup`), and one task at a time on each worker
    (``worker-saturation`` 1.0): Dask's default 1.1 hands a one-thread worker two tasks, and when a task
    kills its worker the one queued behind it takes a strike too (``allowed-failures``), so an innocent
    case could fail as ``KilledWorker`` beside a deadly one (tests/test_sweep.py saw it)."""
    import dask
    from distributed import LocalCluster
    with dask.config.set({"distributed.scheduler.worker-saturation": 1.0}):
        return LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                            scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},   # HTTP routes: any free port
                            silence_logs=logging.CRITICAL, env={"NUMBA_NUM_THREADS": "1"}, preload=[__name__])


def worker_versions() -> tuple:
    """``(deltasim version, simulator version)`` where this runs: a worker must match its client."""
    from simcore.hierarchy import SIM_VERSION

    from .simcache import package_version
    return package_version(), SIM_VERSION


def _check_workers(client, address) -> None:
    """CLIError if the scheduler (which unpickles the tasks) or a connected worker cannot import this
    package, or runs another version of it."""
    mine = worker_versions()
    hint = "install the same deltasim on the scheduler's and every worker's host"
    theirs = {}
    for where, call in (("scheduler", client.run_on_scheduler), ("workers", client.run)):
        try:
            found = call(worker_versions)
        except Exception as err:  # noqa: BLE001 - any failure to run our code there is the same message
            raise CLIError(f"--scheduler {address}: the {where} cannot run deltasim ({type(err).__name__}: "
                           f"{' '.join(str(err).split())}); {hint}") from None
        theirs.update({"scheduler": found} if where == "scheduler" else found)
    for worker, version in sorted(theirs.items()):
        if tuple(version) != mine:
            raise CLIError(f"--scheduler {address}: {'the scheduler' if worker == 'scheduler' else f'worker {worker}'} "
                           f"runs deltasim {version[0]} (simulator version {version[1]}), this client {mine[0]} "
                           f"({mine[1]}); {hint}")


def dask_setup(worker) -> None:
    """Dask preload of the local cluster's worker processes (restarted ones included): they ignore
    SIGINT, so that Ctrl-C in a terminal, which reaches the whole process group, interrupts the client
    alone; the client then cancels the tasks and stops the cluster.

    They also re-read Numba's configuration. The cluster's ``env`` (``NUMBA_NUM_THREADS=1``) reaches a
    worker process after its start-up has re-imported the client's main module, which imports Numba
    with the default thread count (the core count). Numba re-reads the environment whenever it
    compiles, and one that finds the thread count changed after its thread pool started raises
    ``RuntimeError``: on a fresh install, where the first task compiles the kernels, ``--jobs 2`` failed
    that way. Read here, before any task starts the pool, the worker's Numba agrees with its
    environment from the start."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    numba_config = sys.modules.get("numba.core.config")
    if numba_config is not None:
        numba_config.reload_config()


class Executor:
    """Where tasks run: this process, a local Dask cluster, or a running one.

    A context manager: a local cluster starts on entry and stops on exit; a running cluster is
    connected to on entry (after checking that its scheduler and workers run this deltasim) and
    disconnected from on exit.

    Parameters
    ----------
    jobs : int
        Without ``scheduler``: 1 runs the tasks in this process, in order, without Dask; N > 1 on a
        `local_cluster` of N worker processes with one thread each.
    scheduler : str or None
        Address of a running Dask scheduler (``tcp://HOST:PORT``); ``jobs`` is then ignored.
    tasks : int or None
        How many tasks it will run, when known: one or none run in this process without a scheduler
        (no local cluster is worth starting for them).
    """

    def __init__(self, jobs: int = 1, scheduler: str | None = None, *, tasks: int | None = None):
        if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
            raise ValueError(f"jobs must be a positive integer, got {jobs!r}")
        if scheduler is None and tasks is not None and tasks <= 1:
            jobs = 1
        self.jobs, self.scheduler = jobs, scheduler
        self._client = self._cluster = None

    @property
    def in_process(self) -> bool:
        return self.scheduler is None and self.jobs == 1

    @property
    def task_threads(self):
        """Numba threads a simulation task should use: None (all) in this process, else 1."""
        return None if self.in_process else 1

    def __enter__(self):
        if self.in_process:
            return self
        try:
            from distributed import Client
        except ImportError:
            raise CLIError(f"running on Dask needs dask.distributed, which is not installed ({_INSTALL_HINT})") from None
        if self.scheduler is not None:
            try:
                self._client = Client(self.scheduler, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
            except (OSError, TimeoutError) as err:
                raise CLIError(f"--scheduler {self.scheduler}: cannot connect: {' '.join(str(err).split())}") from None
            try:
                _check_workers(self._client, self.scheduler)
            except BaseException:
                self.close()
                raise
            return self
        self._cluster = local_cluster(self.jobs)
        self._client = Client(self._cluster, set_as_default=False)
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self) -> None:
        client, cluster, self._client, self._cluster = self._client, self._cluster, None, None
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()

    @property
    def client(self):
        """The ``distributed.Client`` (None in this process or before entry)."""
        return self._client

    def run(self, fn, tasks, *, on_done=None, on_error=None, progress=None, label=None) -> None:
        """Run ``fn(*args, **kwargs)`` for every ``(args, kwargs)`` in ``tasks``; see `run_cases`."""
        tasks = list(tasks)

        def finished(index, ok, value):
            if ok:
                if on_done is not None:
                    on_done(index, value)
            elif on_error is not None:
                on_error(index, value)
            else:
                raise value
            if progress is not None:
                if label is not None:
                    progress.set_postfix_str(label(index), refresh=False)
                progress.update(1)

        if self._client is None:
            if not self.in_process:
                raise RuntimeError("Executor.run outside its 'with' block")
            for index, (args, kwargs) in enumerate(tasks):
                try:
                    value, ok = fn(*args, **kwargs), True
                except Exception as err:  # noqa: BLE001 - handed to on_error or re-raised
                    if on_error is None:
                        raise
                    value, ok = err, False
                finished(index, ok, value)
            return
        self._run_dask(fn, tasks, finished)

    def _run_dask(self, fn, tasks, finished) -> None:
        from distributed import as_completed
        client = self._client
        futures = {}
        try:
            with _deferred_interrupt() as interrupted:
                for index, (args, kwargs) in enumerate(tasks):
                    future = client.submit(_apply, fn, args, kwargs, pure=False, priority=len(tasks) - index)
                    futures[future] = index
                ready = as_completed(list(futures), loop=client.loop)
                while futures:
                    if interrupted():
                        raise KeyboardInterrupt
                    batch = ready.next_batch(block=False)
                    if not batch:
                        time.sleep(_POLL_S)
                    for future in batch:
                        index = futures.pop(future)
                        if future.status == "error":
                            ok, value = False, future.exception()
                        else:
                            ok, value = True, future.result()
                        future.release()
                        finished(index, ok, value)
        finally:
            if futures:
                client.cancel(list(futures))


#: How often the client looks for finished tasks (and for Ctrl-C) while it waits on a cluster.
_POLL_S = 0.05


@contextlib.contextmanager
def _deferred_interrupt():
    """While the client waits on a cluster, Ctrl-C (SIGINT) only sets a flag, which the waiting loop
    turns into KeyboardInterrupt where it checks it: the default handler raises wherever the main
    thread happens to be, finalizers included, where Python prints the exception and drops it.
    Yields a function telling whether Ctrl-C came. Outside the main thread, or where SIGINT is
    ignored, nothing changes."""
    hits = []
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield lambda: False
        return
    signal.signal(signal.SIGINT, lambda signum, frame: hits.append(signum))
    try:
        yield lambda: bool(hits)
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def run_cases(fn, tasks, *, jobs: int = 1, scheduler: str | None = None, on_done=None, on_error=None,
              progress=None, label=None) -> None:
    """Run ``fn(*args, **kwargs)`` for every ``(args, kwargs)`` in ``tasks``, on an `Executor` of its own.

    Parameters
    ----------
    fn : callable
        The task function; on a cluster it travels by pickle (a module-level function of an
        installed package, or a ``functools.partial`` of one, goes by reference).
    tasks : iterable of (tuple, dict)
        Positional and keyword arguments of each task. Earlier tasks are started first.
    jobs, scheduler
        As for `Executor` (one task alone runs in this process unless ``scheduler`` is given).
    on_done : callable, optional
        ``on_done(index, result)``, called in this process as each task finishes, in the order they
        finish.
    on_error : callable, optional
        ``on_error(index, exception)`` for a task that raised; the other tasks go on. Without it, the
        first error cancels the tasks not finished and propagates. A worker that dies is replaced and
        its tasks run again elsewhere; a task whose workers keep dying (3 times, Dask's
        ``allowed-failures``) fails with ``distributed.KilledWorker``.
    progress : tqdm bar, optional
        Advanced by one per finished task, its postfix set to ``label(index)``.
    label : callable, optional

    Raises
    ------
    KeyboardInterrupt
        After cancelling the tasks not finished (Ctrl-C); the caller saves what finished.
    """
    tasks = list(tasks)
    with Executor(jobs, scheduler, tasks=len(tasks)) as executor:
        executor.run(fn, tasks, on_done=on_done, on_error=on_error, progress=progress, label=label)
