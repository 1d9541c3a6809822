"""Numba's on-disk cache (``cache=True``) is keyed on the time stamp of the file that defines a kernel,
not on the files whose code or constants it compiles in. Each such file therefore carries
``_JIT_DEPS_SHA256``, a digest of the files it depends on: this test fails when one of them changed
and the digest was not updated, and updating it changes the dependent file, which invalidates its
cached kernels (a stale one would silently simulate the old cache semantics)."""
import hashlib
import importlib
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

# dependent module -> the files (relative to the repository root) its compiled kernels take code from
JIT_DEPENDENCIES = {
    "simcore._phases": ["simcore/cache.py"],
    "traces._generate": ["traces/_steps.py", "traces/_backward.py", "traces/_group_steps.py", "traces/_layout.py"],
    "traces._group_steps": ["traces/_emit.py", "traces/_layout.py"],
    "traces._steps": ["traces/_emit.py", "traces/_layout.py"],
    "traces._backward": ["traces/_emit.py", "traces/_layout.py"],
    "traces._emit": ["traces/_layout.py"],
    "analytic._reuse": ["analytic/_counts.py", "analytic/_l2.py"],
    "analytic._groups": ["analytic/_counts.py"],
    "analytic._counts_fprop": ["analytic/_counts.py", "analytic/_groups.py"],
    "analytic._counts_backward": ["analytic/_counts.py", "analytic/_counts_fprop.py", "analytic/_groups.py"],
    "analytic._followers": ["analytic/_l2.py", "analytic/_schedule.py"],
    "analytic._wgrad": ["analytic/_counts.py", "analytic/_counts_grouped.py", "analytic/_l2.py", "analytic/_schedule.py",
                        "analytic/_timeline.py"],
    "analytic._counts_grouped": ["analytic/_counts.py", "analytic/_counts_fprop.py", "analytic/_groups.py",
                                 "analytic/_reuse.py"],
    "analytic._grouped_model": ["analytic/_counts.py", "analytic/_counts_grouped.py", "analytic/_grouped_rereads.py",
                                "analytic/_grouped_returns.py", "analytic/_l1_rounds.py", "analytic/_l2.py",
                                "analytic/_readers.py", "analytic/_schedule.py", "analytic/_stores.py"],
    "analytic._l1_rounds": ["analytic/_l1_sampled.py", "analytic/_counts_grouped.py"],
    "analytic._readers": ["analytic/_reuse.py"],
    "analytic._grouped_returns": ["analytic/_counts.py", "analytic/_schedule.py"],
    "analytic._grouped_rereads": ["analytic/_counts.py"],
    "analytic._store_only": ["analytic/_l2.py", "analytic/_timeline.py"],
    "analytic._schedule": ["analytic/_dgrad_places.py"],
    "analytic._stores": ["analytic/_schedule.py"],
    "analytic._wave_windows": ["analytic/_schedule.py"],
    "analytic._dispatch": ["analytic/_l2.py", "analytic/_schedule.py", "analytic/_timeline.py"],
    "analytic._issue_order": ["analytic/_line_windows.py"],
    "analytic._l1_sampled": ["analytic/_counts.py", "analytic/_dispatch.py", "simcore/cache.py", "simcore/metrics.py",
                            "traces/_backward.py", "traces/_layout.py"],
}
# modules of constants that kernels read (Numba freezes global values at compile time)
CONSTANT_MODULES = {"traces/_layout.py", "simcore/metrics.py"}


def _has_kernels(text: str) -> bool:
    return "@njit" in text or "@numba.njit" in text


def digest(paths) -> str:
    h = hashlib.sha256()
    for path in paths:
        h.update((ROOT / path).read_bytes())
    return h.hexdigest()[:16]


@pytest.mark.parametrize("module", sorted(JIT_DEPENDENCIES))
def test_dependency_digest_is_current(module):
    expected = digest(JIT_DEPENDENCIES[module])
    found = importlib.import_module(module)._JIT_DEPS_SHA256
    assert found == expected, (
        f"{', '.join(JIT_DEPENDENCIES[module])} changed: set _JIT_DEPS_SHA256 = \"{expected}\" in "
        f"{module.replace('.', '/')}.py (that edit also makes Numba recompile its cached kernels)")


def test_every_cross_module_kernel_import_is_listed():
    """A kernel module that imports from a module with kernels (or constants), its package's or another's, is listed
    above."""
    listed = {(m, dep) for m, deps in JIT_DEPENDENCIES.items() for dep in deps}
    found = set()
    for package in ("simcore", "traces", "analytic", "validation"):
        for path in sorted((ROOT / package).glob("*.py")):
            text = path.read_text()
            if not _has_kernels(text):
                continue
            for line in text.splitlines():
                if not (line.startswith("from ") and " import " in line):
                    continue
                source = line.split()[1]
                if source.startswith("."):
                    dep = f"{package}/{source[1:]}.py"
                elif source.split(".")[0] in ("simcore", "traces", "analytic", "validation") and "." in source:
                    dep = source.replace(".", "/") + ".py"      # another package's kernels (`analytic._l1_sampled`)
                else:
                    continue
                if (ROOT / dep).exists() and (dep in CONSTANT_MODULES or _has_kernels((ROOT / dep).read_text())):
                    found.add((f"{package}.{path.stem}", dep))
    assert found == listed
