"""The package import DAG of appliance_cli (README, Layout), checked on every import statement,
top-level or inside a function: a new edge that breaks it fails here, naming file and line.

    cli ──> core, bundle, lab, runner, debian      (cli is the composition root)
    core ──> runner, bundle                         (ports and events; the install gate)
    lab ──> core, debian                            (site config; the base rootfs, apt closure)
    bundle ──> debian
    runner, debian ──> (nothing of ours)
    everyone ──> errors, content, proc, digest, locks, fsutil, yamlfile, the package's own __init__
    nobody ──> cli, except the `python -m appliance_cli` entry point
    ansible_runner: runner/adapter.py only;  rich, argparse: cli/ only
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "appliance_cli"
LEAVES = {"errors", "content", "proc", "digest", "locks", "fsutil", "yamlfile", "__init__"}
ALLOWED = {
    "cli": {"core", "bundle", "lab", "runner", "debian"},
    "core": {"runner", "bundle"},
    "lab": {"core", "debian"},
    "bundle": {"debian"},
    "runner": set(),
    "debian": set(),
}
# Each exception to the DAG, with why. Deleting one makes test_the_package_dag_holds fail.
EXCEPTIONS = {
    ("__main__.py", "cli"): "`python -m appliance_cli` is the command itself",
}
ONLY_IN = {  # third-party or stdlib module -> where it may be imported
    "ansible_runner": lambda rel: rel == "runner/adapter.py",
    "rich": lambda rel: rel.startswith("cli/"),
    "argparse": lambda rel: rel.startswith("cli/"),
}


def _imports(path: Path) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
    return out


def _layer(rel: str) -> str:
    first = rel.split("/", 1)[0]
    return first[:-3] if first.endswith(".py") else first


def violations(exceptions: dict[tuple[str, str], str] = EXCEPTIONS) -> list[str]:
    found = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        src = _layer(rel)
        for line, module in _imports(path):
            top = module.split(".")[0]
            if top in ONLY_IN and not ONLY_IN[top](rel):
                found.append(f"appliance_cli/{rel}:{line}: imports {top}")
            if top != "appliance_cli" or module == "appliance_cli":
                continue
            dst = module.split(".")[1]
            if dst == src or dst in LEAVES or (rel, dst) in exceptions:
                continue
            if dst not in ALLOWED.get(src, set()):
                found.append(f"appliance_cli/{rel}:{line}: {src} imports {dst} ({module})")
    return found


def test_the_package_dag_holds() -> None:
    assert violations() == []


def test_every_package_has_a_rule() -> None:
    packages = {p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages == set(ALLOWED), "a new package needs its place in ALLOWED (and in the README's DAG)"


def test_each_exception_is_needed() -> None:
    """An exception nobody uses any more is a rule nobody enforces: deleting one must fail."""
    for key in EXCEPTIONS:
        rest = {k: v for k, v in EXCEPTIONS.items() if k != key}
        assert violations(rest), f"exception {key} is not needed: remove it"


def test_a_forbidden_edge_is_reported(tmp_path: Path) -> None:
    """The checker itself: an import of cli from core is named with file and line."""
    global PKG
    saved = PKG
    try:
        fake = tmp_path / "appliance_cli"
        (fake / "core").mkdir(parents=True)
        (fake / "core" / "bad.py").write_text(
            "x = 1\n\ndef f():\n    from appliance_cli.cli import ui\n    import rich\n"
        )
        PKG = fake
        assert violations() == [
            "appliance_cli/core/bad.py:4: core imports cli (appliance_cli.cli)",
            "appliance_cli/core/bad.py:5: imports rich",
        ]
    finally:
        PKG = saved


FUNCTION_LIMIT = 80


def _long_functions(root: Path) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > FUNCTION_LIMIT:
                    out.append(f"{path}:{node.lineno} {node.name}: {length} lines")
    return out


def test_no_function_over_80_lines_in_the_toolkit_or_the_standin() -> None:
    standin = PKG.parent / "tests" / "standin" / "k8s_standin"
    assert _long_functions(PKG) + _long_functions(standin) == []


def test_no_standin_module_over_800_lines() -> None:
    standin = PKG.parent / "tests" / "standin" / "k8s_standin"
    assert standin.is_dir()
    assert [p.name for p in standin.glob("*.py") if len(p.read_text().splitlines()) > 800] == []


def test_test_module_names_are_unique_across_the_test_dirs() -> None:
    """`make test` collects tests/unit, tests/integration and tests/e2e in one pytest run (rootdir
    import mode, no __init__.py there): two modules with one basename stop it at collection."""
    tests = Path(__file__).resolve().parents[1]
    seen: dict[str, list[str]] = {}
    for path in sorted(tests.glob("*/test_*.py")):
        seen.setdefault(path.name, []).append(str(path.relative_to(tests)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}
