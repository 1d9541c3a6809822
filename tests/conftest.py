import os

from hypothesis import HealthCheck, settings

# JIT compilation makes the first example slow; deadlines would only measure the compiler.
settings.register_profile("default", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", deadline=None, max_examples=50, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else "default")
