import os

import pytest
from hypothesis import HealthCheck, settings

# JIT compilation makes the first example slow; deadlines would only measure the compiler.
settings.register_profile("default", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", deadline=None, max_examples=50, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else "default")


@pytest.fixture(scope="session")
def cluster():
    """A local Dask cluster started as the CLIs start theirs (2 worker processes, 1 thread each), shared
    by the tests that ask for it; its client. A task may kill 2 workers before it fails (Dask's
    default: 4), to keep the test of that short."""
    pytest.importorskip("distributed")
    import dask

    from traces.executor import Executor
    with dask.config.set({"distributed.scheduler.allowed-failures": 1}), Executor(jobs=2) as executor:
        yield executor.client
