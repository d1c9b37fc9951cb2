"""Loading code that is not an importable package — the roles' node-side modules and filter
plugins, the project's module_utils — as the tests need it, in one place."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def load_file(name: str, path: Path) -> ModuleType:
    """Execute `path` as module `name` (registered in sys.modules, so it can be imported back)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader, path
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def load_module_utils(role: str | None = None) -> None:
    """The project's module_utils (and a role's own), importable as ansible.module_utils.* as on
    a node; each file once."""
    dirs = [ROOT / "module_utils"] + ([ROOT / "roles" / role / "module_utils"] if role else [])
    for d in dirs:
        for path in sorted(d.glob("*.py")) if d.is_dir() else []:
            name = f"ansible.module_utils.{path.stem}"
            if name not in sys.modules:
                load_file(name, path)


def load_role_module(role: str, name: str) -> ModuleType:
    """roles/ROLE/library/NAME.py, with the module_utils it may import."""
    load_module_utils(role)
    return load_file(f"appliance_test_{role}_{name}", ROOT / "roles" / role / "library" / f"{name}.py")


def load_filter_plugin(role: str, name: str) -> ModuleType:
    return load_file(f"appliance_test_{role}_{name}", ROOT / "roles" / role / "filter_plugins" / f"{name}.py")
