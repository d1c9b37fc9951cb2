"""Validators take the whole value: `re.match` with `^...$` accepts a trailing newline (`$` also
matches before a final "\\n"), so "gpu1\\n" passed as a node name and split the drain plan's remote
command in two. Each validator below refuses the value with a newline after it or inside it and
takes the plain value; a source scan keeps `$`-anchored patterns away from `.match(` for good."""

from __future__ import annotations

import ast
import copy
import re
import tomllib
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from appliance_cli.bundle.mirrors import MirrorMap
from appliance_cli.bundle.model import Artifact, FileEntry, check_digest
from appliance_cli.core import k8snames, researcher, restoreplan
from appliance_cli.core.siteconfig import SiteConfig, load_site, parse_site
from appliance_cli.errors import ApplianceError, ConfigError, UsageError
from appliance_cli.lab.layout import LabLayout
from tests._support.modules import load_file, load_filter_plugin, load_role_module

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = yaml.safe_load((ROOT / "inventories" / "example" / "appliance.yml").read_text())
HEX = "ab" * 32
DIGEST = "sha256:" + HEX

seed = load_role_module("registry", "registry_seed")
manifest_utils = load_file("appliance_test_ws_bundle_manifest", ROOT / "module_utils" / "bundle_manifest.py")
containerd = load_filter_plugin("container_runtime", "containerd_config")


def newline_forms(plain: str) -> list[str]:
    """The value with a newline after it, and with one inside it."""
    return [plain + "\n", plain[:2] + "\n" + plain[2:]]


def _site_problems(data: dict[str, Any]) -> list[str]:
    try:
        parse_site(data)
    except ConfigError as exc:
        return exc.problems
    return []


def _node_name(d: dict[str, Any], v: str) -> None:
    d["nodes"][1]["name"] = v


def _jumpbox_name(d: dict[str, Any], v: str) -> None:
    d["scheduler"]["jumpbox"] = {"name": v, "address": "192.168.10.60"}


def _project_name(d: dict[str, Any], v: str) -> None:
    d["scheduler"]["projects"][0]["name"] = v


def _department_name(d: dict[str, Any], v: str) -> None:
    d["scheduler"]["departments"] = [{"name": v}]


def _domain(d: dict[str, Any], v: str) -> None:
    d["site"]["domain"] = v


SITE_FIELDS = [
    ("nodes[1].name", _node_name, "gpu1"),
    ("scheduler.jumpbox.name", _jumpbox_name, "jumpbox"),
    ("scheduler.projects[0].name", _project_name, "team-a"),
    ("scheduler.departments[0].name", _department_name, "default"),
    ("site.domain", _domain, "runai.acme.example"),
]


@pytest.mark.parametrize(("field", "put", "plain"), SITE_FIELDS, ids=[f[0] for f in SITE_FIELDS])
def test_site_config_fields_refuse_a_newline(field: str, put: Callable[..., None], plain: str) -> None:
    data = copy.deepcopy(EXAMPLE)
    put(data, plain)
    assert _site_problems(data) == []
    for bad in newline_forms(plain):
        data = copy.deepcopy(EXAMPLE)
        put(data, bad)
        problems = _site_problems(data)
        assert any(p.startswith(f"appliance.yml: {field}: {bad!r} ") for p in problems), problems
        assert all("\n" not in p for p in problems), problems  # one line per problem


def test_site_file_with_a_newline_in_a_node_name_is_refused(tmp_path: Path) -> None:
    data = copy.deepcopy(EXAMPLE)
    data["nodes"][1]["name"] = "gpu1\n"
    f = tmp_path / "appliance.yml"
    f.write_text(yaml.safe_dump(data))  # a quoted "gpu1\n", as a hand-written file may hold it
    with pytest.raises(ConfigError) as exc:
        load_site(f)
    assert f"{f}: nodes[1].name: 'gpu1\\n' is not a valid RFC 1123 hostname" in exc.value.problems[0]


@cache
def _example_cfg() -> SiteConfig:
    return parse_site(copy.deepcopy(EXAMPLE))


def _accepts(refusal: type[Exception], fn: Callable[..., object], *args: object) -> bool:
    """True when fn(*args) returns, False when it raises `refusal` (anything else propagates)."""
    try:
        fn(*args)
    except refusal:
        return False
    return True


def _lab_name(v: str) -> bool:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("APPLIANCE_LAB_NAME", v)
        return _accepts(UsageError, LabLayout.default)


def _artifact_name(v: str) -> bool:
    f = FileEntry(path="x.whl", digest=DIGEST, size=1)
    return _accepts(ValueError, lambda: Artifact(name=v, kind="wheel", size=1, digest=DIGEST, files=[f]))


VALIDATORS: list[tuple[str, Callable[[str], bool], str]] = [
    ("k8s label value", lambda v: k8snames.label_value_problem(v) is None, "S5N-3U"),
    ("k8s label key", lambda v: k8snames.label_key_problem(v) is None, "run.ai/type"),
    ("k8s DNS subdomain", lambda v: k8snames.subdomain_problem(v) is None, "runai.acme.example"),
    ("k8s cert SAN", lambda v: k8snames.cert_san_problem(v) is None, "api.acme.example"),
    ("researcher name", lambda v: _accepts(UsageError, researcher.check_request, _example_cfg(), v, "team-a"), "alice"),
    ("backup name", lambda v: _accepts(UsageError, restoreplan.pick_backup, [v], v, "/b", "master1"), "20240102T030405Z"),
    ("lab name", _lab_name, "lab-2"),
    ("sha256 hex (module_utils)", lambda v: _accepts(ValueError, manifest_utils.hex_of, "sha256:" + v, ValueError), HEX),
    ("sha256 digest (bundle)", lambda v: _accepts(ValueError, check_digest, "sha256:" + v), HEX),
    ("image path component", lambda v: _accepts(seed.SeedError, seed.split_reference, f"registry.k8s.io/{v}/pause:3.6"), "coredns"),
    ("image tag", lambda v: _accepts(seed.SeedError, seed.split_reference, f"registry.k8s.io/pause:{v}@{DIGEST}"), "3.6"),
    ("bundle artifact name", _artifact_name, "appliance_toolkit"),
    ("mirror host", lambda v: _accepts(UsageError, MirrorMap.parse, [f"{v}=http://127.0.0.1:8080/dl"], False), "dl.k8s.io"),
]  # fmt: skip


@pytest.mark.parametrize(("what", "accepts", "plain"), VALIDATORS, ids=[v[0] for v in VALIDATORS])
def test_validator_refuses_a_newline(what: str, accepts: Callable[[str], bool], plain: str) -> None:
    assert accepts(plain), f"{what}: {plain!r} refused"
    for bad in newline_forms(plain):
        assert not accepts(bad), f"{what}: {bad!r} accepted"


def test_refused_messages_are_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UsageError) as exc:
        researcher.check_request(_example_cfg(), "alice\nbob", "team-a")
    assert exc.value.message.startswith("researcher name 'alice\\nbob' ")
    monkeypatch.setenv("APPLIANCE_LAB_NAME", "lab\nx")
    with pytest.raises(UsageError) as exc:
        LabLayout.default()
    assert exc.value.message.startswith("APPLIANCE_LAB_NAME 'lab\\nx' ")


def test_a_backup_directory_with_a_newline_is_no_backup() -> None:
    with pytest.raises(ApplianceError, match="no backup on master1"):
        restoreplan.pick_backup(["20240102T030405Z\n"], "latest", "/b", "master1")
    assert restoreplan.pick_backup(["20240102T030405Z"], "latest", "/b", "master1") == "20240102T030405Z"


def test_containerd_keys_with_a_newline_are_quoted() -> None:
    assert containerd.containerd_toml_value({"runc": 1}) == "{ runc = 1 }"  # bare when it may be
    for key in newline_forms("runc"):
        out = containerd.containerd_toml_value({key: 1})
        assert "\n" not in out
        assert tomllib.loads(f"t = {out}")["t"] == {key: 1}


# --- the source scan -----------------------------------------------------------------------------

# Line parsers of siteedit: each pattern is matched against one line of appliance.yml as
# splitlines(keepends=True) gave it, so `$` before that line's own "\n" is the point.
LINE_PARSERS = {
    ("appliance_cli/core/siteedit.py", "_NODES_KEY"),
    ("appliance_cli/core/siteedit.py", "_ITEM"),
    ("appliance_cli/core/siteedit.py", "_REMOVED_LINE"),
    ("appliance_cli/core/siteedit.py", "_KUBERNETES_KEY"),
    ("appliance_cli/core/siteedit.py", "_VERSION_LINE"),
}
_LEADING_FLAGS = re.compile(r"(?:\(\?[aiLmsux]+\))*")


def scanned_files() -> list[Path]:
    return sorted(
        [
            *(ROOT / "appliance_cli").rglob("*.py"),
            *(ROOT / "module_utils").glob("*.py"),
            *ROOT.glob("roles/*/library/*.py"),
            *ROOT.glob("roles/*/filter_plugins/*.py"),
        ]
    )


def _multiline_flag(node: ast.expr | None) -> bool:
    return node is not None and any(
        (isinstance(n, ast.Attribute) and n.attr in ("M", "MULTILINE")) or (isinstance(n, ast.Name) and n.id in ("M", "MULTILINE"))
        for n in ast.walk(node)
    )  # fmt: skip


def _flags_arg(call: ast.Call, position: int) -> ast.expr | None:
    if len(call.args) > position:
        return call.args[position]
    return next((k.value for k in call.keywords if k.arg == "flags"), None)


def _split_flags(pattern: str) -> tuple[str, str]:
    """(its leading inline flags such as `(?i)`, the rest)."""
    m = _LEADING_FLAGS.match(pattern)
    end = m.end() if m else 0
    return pattern[:end], pattern[end:]


def _end_anchored(pattern: str, multiline: bool) -> bool:
    """Does `pattern` end on `$` in its single-line sense (a trailing newline slips through)?"""
    if multiline or "m" in _split_flags(pattern)[0]:
        return False
    body = pattern[:-1]
    escaped = (len(body) - len(body.rstrip("\\"))) % 2 == 1  # `\$` is a literal dollar
    return pattern.endswith("$") and not escaped


def _name_of(node: ast.expr) -> str | None:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def scan(source: str) -> tuple[set[str], list[tuple[int, str, str]]]:
    """(the names compiled patterns are bound to, the `$`-anchored uses: (line, name, pattern)).

    A use is `X.match(...)` of a pattern compiled without re.M that ends on `$`, `X.search(...)`
    of one that also starts with `^`, and `re.match`/`re.search` of such a literal pattern."""
    tree = ast.parse(source)
    strings = {
        t.id: n.value.value
        for n in tree.body
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
        for t in n.targets
        if isinstance(t, ast.Name)
    }

    def literal(node: ast.expr) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        return strings.get(node.id) if isinstance(node, ast.Name) else None

    def is_re(node: ast.expr, attr: str) -> bool:
        return isinstance(node, ast.Attribute) and node.attr == attr and _name_of(node.value) == "re"

    compiled: dict[str, tuple[str, bool]] = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) and is_re(n.value.func, "compile"):
            pattern = literal(n.value.args[0]) if n.value.args else None
            for t in n.targets:
                if (name := _name_of(t)) and pattern is not None:
                    compiled[name] = (pattern, _multiline_flag(_flags_arg(n.value, 1)))
    uses = []
    for n in ast.walk(tree):
        if not isinstance(n, ast.Call) or not isinstance(n.func, ast.Attribute):
            continue
        if n.func.attr not in ("match", "search"):
            continue
        if _name_of(n.func.value) == "re":
            pattern = literal(n.args[0]) if n.args else None
            found = None if pattern is None else (pattern, _multiline_flag(_flags_arg(n, 2)))
            name = f"re.{n.func.attr}"
        else:
            name = _name_of(n.func.value) or ""
            found = compiled.get(name)
        if found is None:
            continue
        pattern, multiline = found
        starts = _split_flags(pattern)[1].startswith("^")
        if _end_anchored(pattern, multiline) and (n.func.attr == "match" or starts):
            uses.append((n.lineno, name, pattern))
    return set(compiled), uses


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ('import re\nX = re.compile(r"^a$")\nX.match(s)\n', True),
        ('import re\nX = re.compile(r"a$")\nX.match(s)\n', True),
        ('import re\nP = r"^a$"\nclass C:\n    X = re.compile(P)\n    def f(self, s):\n        return self.X.match(s)\n', True),
        ('import re\nre.match(r"^a$", s)\n', True),
        ('import re\nre.search(r"^a$", s)\n', True),
        ('import re\nX = re.compile(r"(?i)^a$")\nX.search(s)\n', True),
        ('import re\nX = re.compile(r"^a$")\nX.fullmatch(s)\n', False),
        ('import re\nX = re.compile(r"^a$", re.M)\nX.match(s)\n', False),
        ('import re\nX = re.compile(r"(?m)^a$")\nX.match(s)\n', False),
        ('import re\nre.match(r"^a$", s, flags=re.MULTILINE)\n', False),
        ('import re\nX = re.compile(r"^a\\$")\nX.match(s)\n', False),
        ('import re\nX = re.compile(r"^a")\nX.match(s)\n', False),
        ('import re\nX = re.compile(r"a$")\nX.search(s)\n', False),
    ],
)  # fmt: skip
def test_the_scan_tells_anchored_uses(source: str, found: bool) -> None:
    assert bool(scan(source)[1]) is found


def test_no_validator_lets_a_trailing_newline_through() -> None:
    files = scanned_files()
    rel = {p.relative_to(ROOT).as_posix(): p for p in files}
    compiled = {}
    offenders, line_parsers = [], set()
    for name, path in rel.items():
        compiled[name], uses = scan(path.read_text())
        for line, what, pattern in uses:
            if (name, what) in LINE_PARSERS:
                line_parsers.add((name, what))
            else:
                offenders.append(f"{name}:{line}: {what} = {pattern!r}: use fullmatch (or \\Z)")
    # the scan read what it should, and found the patterns there
    core = "appliance_cli/core"
    assert "_RFC1123_LABEL" in compiled[f"{core}/siteconfig.py"]
    assert {"_LABEL_VALUE", "_QUALIFIED_NAME", "_DNS1123_SUBDOMAIN"} <= compiled[f"{core}/k8snames.py"]
    assert "HEX_RE" in compiled["module_utils/bundle_manifest.py"]
    assert {"_COMPONENT_RE", "_TAG_RE"} <= compiled["roles/registry/library/registry_seed.py"]
    assert "_BARE_KEY" in compiled["roles/container_runtime/filter_plugins/containerd_config.py"]
    assert {"_CHART", "_VER"} <= compiled["appliance_cli/rules/helmcharts.py"]
    assert offenders == []
    assert line_parsers == LINE_PARSERS  # each exception still is one (drop it from the list if not)
