"""Loads the single-file stand-in (tests/standin/k8s_standin.py) once, for the tests that use it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SRC = Path(__file__).resolve().parents[1] / "standin" / "k8s_standin.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("k8s_standin", SRC)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["k8s_standin"] = mod
    spec.loader.exec_module(mod)
    return mod


S = sys.modules.get("k8s_standin") or load()
