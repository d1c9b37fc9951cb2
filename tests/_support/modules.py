"""Loading code that is not an importable package — the roles' node-side modules and filter
plugins, the project's module_utils — as the tests need it, and the AnsibleModule double that
drives those modules, in one place."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

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


class ModuleFailed(Exception):
    """A role module's fail_json, raised with its message; `result` is what the task's result
    would hold (msg and the other fields the module passed)."""

    def __init__(self, msg: str, result: dict[str, Any] | None = None) -> None:
        super().__init__(msg)
        self.result = {"failed": True, "msg": msg, **(result or {})}


Answer = Callable[[list[str], Any], tuple[int, str, str]]


class FakeModule:
    """What the roles' modules use of AnsibleModule, to drive their converge() in a test: params,
    check_mode and _diff; run_command records each argv in `ran` and answers through `answer`
    (argv, stdin data -> rc, stdout, stderr; by default rc 0 and no output); fail_json raises
    ModuleFailed with its message. One double for every module test (no copy per file)."""

    def __init__(
        self,
        params: dict[str, Any],
        check_mode: bool = False,
        diff: bool = True,
        answer: Answer | None = None,
    ) -> None:
        self.params, self.check_mode, self._diff = params, check_mode, diff
        self.ran: list[list[str]] = []
        self._answer = answer

    def run_command(self, argv, data=None, binary_data=False, umask=None, **_: Any) -> tuple[int, str, str]:
        self.ran.append(list(argv))
        if self._answer is None:
            return 0, "", ""
        if umask is None:
            return self._answer(list(argv), data)
        old = os.umask(umask)  # as AnsibleModule.run_command applies it to the child
        try:
            return self._answer(list(argv), data)
        finally:
            os.umask(old)

    def fail_json(self, msg: str, **fields: Any) -> None:
        raise ModuleFailed(msg, fields)


def run_for_real(argv: list[str], data: Any = None) -> tuple[int, str, str]:
    """An `answer` for FakeModule that runs the real tool (integration tests)."""
    p = subprocess.run(argv, input=data, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr
