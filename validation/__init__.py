"""validation: model vs simulation, calibration, reports.

Command-line tools::

    python -m validation.compare NETWORK ...     # model vs simulation per layer (tables, JSON/HDF5, plot)
    python -m validation.calibrate NETWORK ...   # fit analytic.ReuseFactors against simulation
    python -m validation.accuracy NETWORK ...    # DESIGN section 8's accuracy table
    python -m validation.sweep NETWORK ...       # networks x GPU variants x batch sizes, on Dask
    python -m validation.results FILE            # print a stored compare results file

Public names (imported lazily, so ``python -m validation.X`` does not import X twice):
``load_results``, ``read_ncu_csv``, ``match_measurements``, ``coordinate_descent``, ``fit_factors``,
``load_sweep``, ``run_cases``, ``Executor``.
"""

_LAZY = {"load_results": "results", "FORMAT": "results", "VERSION": "results",
         "read_ncu_csv": "ncu", "match_measurements": "ncu", "load_measurements": "ncu",
         "coordinate_descent": "calibrate", "fit_factors": "calibrate",
         "format_document": "report", "eng": "report",
         "load_sweep": "sweep_results", "run_cases": "executor", "Executor": "executor"}

__all__ = sorted(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'validation' has no attribute {name!r}")
