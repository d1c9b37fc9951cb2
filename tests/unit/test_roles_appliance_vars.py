"""roles/appliance_vars.yml, the list of cross-role appliance_* variables, against the roles:
every appliance_* a role reads is listed and produced somewhere, and the list says truly who
produces and who reads each."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "roles"
CONTRACT = yaml.safe_load((ROLES / "appliance_vars.yml").read_text())
# a name, not part of a file name such as appliance_kube.fact, nor the package appliance_cli (the
# filter plugins import its rules), nor the role appliance_paths (a meta dependency of its readers)
NAME = re.compile(r"\bappliance_(?!cli\b|paths\b)[a-z0-9_]+\b(?!\.fact)")


def _role_files() -> list[Path]:
    return [
        p
        for p in ROLES.glob("*/**/*")
        if p.is_file()
        and p.suffix in (".yml", ".yaml", ".j2", ".py")
        and p.name != "README.md"
        and "molecule" not in p.relative_to(ROLES).parts  # a role's tests read the site, the role does not
    ]


def _code(path: Path) -> str:
    """The file without its comment lines (a comment naming a variable does not read it)."""
    return "\n".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("#"))


def readers(files: list[Path] | None = None, root: Path = ROLES) -> dict[str, dict[Path, str]]:
    """appliance_* name -> {file: role} for every role file that names it."""
    out: dict[str, dict[Path, str]] = {}
    for p in files if files is not None else _role_files():
        role = p.relative_to(root).parts[0]
        for name in set(NAME.findall(_code(p))):
            if not name.startswith(f"{role}_"):  # a role's own variable (appliance_paths'), not a read
                out.setdefault(name, {})[p] = role
    return out


def _produces(path: str, name: str) -> bool:
    p = REPO / path
    if path.startswith("appliance_cli/"):  # the CLI's extra vars: a quoted key in the package
        return any(f'"{name}"' in f.read_text() for f in (REPO / "appliance_cli").rglob("*.py"))
    return p.is_file() and re.search(rf"^\s*{name}:|\b{name}\b", _code(p), re.M) is not None


def test_every_appliance_variable_a_role_reads_is_listed():
    assert sorted(set(readers()) - set(CONTRACT)) == []


@pytest.mark.parametrize("name", sorted(CONTRACT))
def test_the_list_says_who_produces_and_who_reads(name):
    entry = CONTRACT[name]
    for path in entry["produced_by"]:
        assert _produces(path, name), f"{path} does not produce {name}"
    producers = {REPO / p for p in entry["produced_by"]}
    roles = {role for p, role in readers().get(name, {}).items() if p not in producers}
    assert sorted(roles) == sorted(entry["read_by"])


@pytest.mark.parametrize("name", sorted(CONTRACT))
def test_what_nobody_produces_is_an_optional_override(name):
    """A variable no file produces must have a default wherever a role reads it."""
    if CONTRACT[name]["produced_by"]:
        return
    for p in readers().get(name, {}):
        assert re.search(rf"\b{name}\s*\|\s*default\(", _code(p)), f"{p} reads {name} without a default"


def test_an_unlisted_variable_is_caught(tmp_path):
    role = tmp_path / "r" / "defaults"
    role.mkdir(parents=True)
    (role / "main.yml").write_text("r_x: '{{ appliance_never_listed }}'\n# appliance_in_a_comment\n")
    found = readers([role / "main.yml"], root=tmp_path)
    assert set(found) == {"appliance_never_listed"} and "appliance_never_listed" not in CONTRACT
