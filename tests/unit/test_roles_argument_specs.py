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
