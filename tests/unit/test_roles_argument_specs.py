"""Each role's defaults/main.yml and meta/argument_specs.yml name the same variables, with
matching types: role_vars may set only what defaults/ documents, and the role validates only
what argument_specs lists, so a variable missing from one side is either unsettable or unchecked."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

ROLES = Path(__file__).resolve().parents[2] / "roles"
ROLE_NAMES = sorted(p.name for p in ROLES.iterdir() if (p / "defaults" / "main.yml").is_file())

# argument_specs type -> the Python type a literal (non-templated) default must have
_TYPES = {"str": str, "path": str, "bool": bool, "int": int, "list": list, "dict": dict}


def _defaults(role: str) -> dict:
    return yaml.safe_load((ROLES / role / "defaults" / "main.yml").read_text()) or {}


def _options(role: str) -> dict[str, dict]:
    """Options of every entry point (main, and e.g. registry's trust/verify)."""
    specs = yaml.safe_load((ROLES / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    options: dict[str, dict] = {}
    for entry in specs.values():
        for name, spec in (entry.get("options") or {}).items():
            options.setdefault(name, spec)
    return options


def test_every_role_is_checked():
    assert len(ROLE_NAMES) >= 9 and "container_runtime" in ROLE_NAMES


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_defaults_and_argument_specs_name_the_same_variables(role):
    defaults, options = set(_defaults(role)), set(_options(role))
    assert sorted(defaults - options) == [], "in defaults/main.yml, not in meta/argument_specs.yml"
    assert sorted(options - defaults) == [], "in meta/argument_specs.yml, not in defaults/main.yml"


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_literal_defaults_have_the_declared_type(role):
    options = _options(role)
    wrong = []
    for name, value in _defaults(role).items():
        if isinstance(value, str) and "{{" in value:
            continue  # templated: its type is known only at run time
        want = _TYPES.get(options.get(name, {}).get("type", "str"))
        if want is not None and not isinstance(value, want):
            wrong.append(f"{name}: {type(value).__name__}, spec says {options[name].get('type')}")
    assert wrong == []


def test_the_comparison_sees_a_drift(tmp_path, monkeypatch):
    """A default without a spec entry is caught (the check is not vacuous)."""
    role = tmp_path / "r"
    (role / "defaults").mkdir(parents=True)
    (role / "meta").mkdir()
    (role / "defaults" / "main.yml").write_text("r_a: 1\nr_b: x\n")
    (role / "meta" / "argument_specs.yml").write_text(
        "argument_specs:\n  main:\n    options:\n      r_a: {type: str}\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "ROLES", tmp_path)
    with pytest.raises(AssertionError):
        test_defaults_and_argument_specs_name_the_same_variables("r")
    with pytest.raises(AssertionError):
        test_literal_defaults_have_the_declared_type("r")


def _calls_in(node: object) -> list[dict]:
    """Every include_role/import_role with tasks_from in a loaded YAML document, at any depth."""
    if isinstance(node, list):
        return [c for value in node for c in _calls_in(value)]
    if not isinstance(node, dict):
        return []
    own = [
        node[key]
        for key in ("ansible.builtin.include_role", "ansible.builtin.import_role")
        if isinstance(node.get(key), dict) and "tasks_from" in node[key]
    ]
    return own + [c for value in node.values() for c in _calls_in(value)]


def _tasks_from_calls(root: Path) -> list[tuple[str, int, str, str]]:
    """(file, line, role, tasks_from) of every include_role/import_role with tasks_from in the
    roles and playbooks under ROOT, as written."""
    calls = []
    for path in sorted([*root.glob("roles/**/*.yml"), *root.glob("playbooks/*.yml")]):
        lines = path.read_text().splitlines()
        for call in _calls_in(yaml.safe_load(path.read_text())):
            line = next(i for i, text in enumerate(lines, 1) if f"tasks_from: {call['tasks_from']}" in text)
            calls.append((str(path.relative_to(root)), line, call["name"], str(call["tasks_from"])))
    return calls


def entry_points_bypassed(root: Path) -> list[str]:
    """ansible-core validates an entry point's argument spec only when tasks_from names it exactly
    (role/__init__.py, `_prepend_validation_task`: `argspecs.get(self._from_files.get('tasks',
    'main'))`, ansible-core 2.19): `tasks_from: trust.yml` runs registry's trust.yml with its
    spec unchecked. Each such call, naming file and line."""
    found = []
    for file, line, role, tasks_from in _tasks_from_calls(root):
        spec_file = root / "roles" / role / "meta" / "argument_specs.yml"
        specs = yaml.safe_load(spec_file.read_text())["argument_specs"] if spec_file.is_file() else {}
        stem = tasks_from.rsplit(".", 1)[0] if tasks_from.endswith((".yml", ".yaml")) else tasks_from
        if stem in specs and tasks_from != stem:
            found.append(
                f"{file}:{line}: tasks_from: {tasks_from} skips {role}'s '{stem}' spec (write {stem})"
            )
    return found


def test_every_entry_point_with_a_spec_is_validated():
    calls = _tasks_from_calls(ROLES.parent)
    assert len(calls) >= 20  # the walk sees the calls
    assert entry_points_bypassed(ROLES.parent) == []


def test_a_call_that_skips_its_spec_is_named(tmp_path):
    (tmp_path / "roles" / "r" / "meta").mkdir(parents=True)
    (tmp_path / "roles" / "r" / "meta" / "argument_specs.yml").write_text(
        "argument_specs:\n  main: {options: {}}\n  trust: {options: {}}\n"
    )
    (tmp_path / "playbooks").mkdir()
    (tmp_path / "playbooks" / "p.yml").write_text(
        "- hosts: all\n  tasks:\n"
        "    - {name: a, ansible.builtin.import_role: {name: r, tasks_from: trust.yml}}\n"
        "    - {name: b, ansible.builtin.include_role: {name: r, tasks_from: trust}}\n"
        "    - {name: c, ansible.builtin.include_role: {name: r, tasks_from: other.yml}}\n"
    )
    assert entry_points_bypassed(tmp_path) == [
        "playbooks/p.yml:3: tasks_from: trust.yml skips r's 'trust' spec (write trust)"
    ]
