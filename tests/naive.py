"""Slow, obviously-correct pure-Python references (stumpy style).

The cache references live in ``tests/naive_cache.py`` and the address-stream reference in
``tests/naive_stream.py``; this module re-exports both so tests can ``from tests import naive``.
"""
from tests.naive_cache import *  # noqa: F401,F403
from tests.naive_stream import *  # noqa: F401,F403
