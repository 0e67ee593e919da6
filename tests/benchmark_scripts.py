"""Import a script of ``benchmarks/`` (a package: the repository root must be on ``sys.path``), for its tests."""

from __future__ import annotations

import importlib
from types import ModuleType


def load_benchmark(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` as the module ``benchmarks.<name>`` (``name`` may be dotted: ``probes.engine_plan``)."""
    return importlib.import_module(f"benchmarks.{name}")
