"""The package import DAG of appliance_cli (README, Layout), checked on every import statement,
top-level or inside a function: a new edge that breaks it fails here, naming file and line.

    cli ──> core, bundle, lab, runner, debian      (cli is the composition root)
    core ──> runner, bundle                         (ports and events; the install gate)
    lab ──> core, debian                            (site config; the base rootfs, apt closure)
    bundle ──> debian
    runner, debian ──> (nothing of ours)
    rules ──> the standard library only           (pure rules the roles' filter plugins share)
    everyone ──> rules, errors, content, proc, digest, locks, fsutil, yamlfile, the package's __init__
    nobody ──> cli, except the `python -m appliance_cli` entry point
    ansible_runner: runner/adapter.py only;  rich, argparse: cli/ only
    roles/*/filter_plugins, action_plugins ──> appliance_cli.rules only (inside ansible-playbook)
    no module loaded by file path, nor sys.path changed: an edge this test cannot see is no edge
    tests/standin ──> the standard library, yaml, jsonschema and itself: never the product
    cli/ runs no command: no appliance_cli.core.remote, none of its runners, no process started
    (commands on nodes run in core; cli parses, renders, maps exit codes)
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "appliance_cli"
ROLES = PKG.parent / "roles"
LEAVES = {"rules", "errors", "content", "proc", "digest", "locks", "fsutil", "yamlfile", "__init__"}
ALLOWED = {
    "cli": {"core", "bundle", "lab", "runner", "debian"},
    "core": {"runner", "bundle"},
    "lab": {"core", "debian"},
    "bundle": {"debian"},
    "runner": set(),
    "debian": set(),
    "rules": set(),
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


# What loads code past the import statements (by file path, by a computed name, or by changing
# where imports look): none of it in appliance_cli or the filter plugins.
PATH_LOADERS = {
    "spec_from_file_location", "spec_from_loader", "module_from_spec", "SourceFileLoader",
    "SourcelessFileLoader", "import_module", "__import__", "run_path", "run_module", "load_source",
}  # fmt: skip


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of each import; `from appliance_cli import x` counts as appliance_cli.x when x
    is a module of the package (else it is a name from its __init__)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level > 0:
            out.append((node.lineno, "." * node.level + (node.module or "")))
        elif isinstance(node, ast.ImportFrom) and node.module == "appliance_cli":
            out += [(node.lineno, _of_package(a.name)) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
    return out


def _of_package(name: str) -> str:
    is_module = (PKG / name / "__init__.py").is_file() or (PKG / f"{name}.py").is_file()
    return f"appliance_cli.{name}" if is_module else "appliance_cli"


def _path_loading(path: Path) -> list[str]:
    """`line: name` of each use of a path loader, and of sys.path."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
        if name in PATH_LOADERS:
            out.append(f"{node.lineno}: {name}")
        elif name == "path" and isinstance(node, ast.Attribute) and ast.unparse(node.value) == "sys":
            out.append(f"{node.lineno}: sys.path")
    return out


def _layer(rel: str) -> str:
    first = rel.split("/", 1)[0]
    return first[:-3] if first.endswith(".py") else first


def violations(exceptions: dict[tuple[str, str], str] = EXCEPTIONS) -> list[str]:
    found = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        src = _layer(rel)
        found += [
            f"appliance_cli/{rel}:{use} (loads code the import DAG cannot see)" for use in _path_loading(path)
        ]
        for line, module in _imports(path):
            top = module.split(".")[0]
            if module.startswith("."):
                found.append(f"appliance_cli/{rel}:{line}: relative import {module} (write it absolute)")
            if top in ONLY_IN and not ONLY_IN[top](rel):
                found.append(f"appliance_cli/{rel}:{line}: imports {top}")
            if (
                src == "rules"
                and top not in sys.stdlib_module_names
                and not module.startswith("appliance_cli.rules")
            ):
                found.append(
                    f"appliance_cli/{rel}:{line}: rules imports {module} (the standard library only)"
                )
            if top != "appliance_cli" or module == "appliance_cli":
                continue
            dst = module.split(".")[1]
            if dst == src or dst in LEAVES or (rel, dst) in exceptions:
                continue
            if dst not in ALLOWED.get(src, set()):
                found.append(f"appliance_cli/{rel}:{line}: {src} imports {dst} ({module})")
    return found


def filter_plugin_violations(roles: Path = ROLES) -> list[str]:
    """The roles' filter and action plugins run inside ansible-playbook: of ours they import the
    pure rules only (never the CLI, the runner, nor anything that would pull ansible_runner in)."""
    found = []
    for path in sorted([*roles.glob("*/filter_plugins/*.py"), *roles.glob("*/action_plugins/*.py")]):
        rel = path.relative_to(roles.parent).as_posix()
        found += [f"{rel}:{use} (loads code the import DAG cannot see)" for use in _path_loading(path)]
        for line, module in _imports(path):
            top = module.split(".")[0]
            if top == "ansible_runner" or module.startswith("."):
                found.append(f"{rel}:{line}: imports {module}")
            elif top == "appliance_cli" and not module.startswith("appliance_cli.rules"):
                found.append(f"{rel}:{line}: imports {module} (plugins: appliance_cli.rules only)")
    return found


def test_the_package_dag_holds() -> None:
    assert violations() == []


def test_filter_plugins_import_only_the_rules() -> None:
    assert filter_plugin_violations() == []


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
        (fake / "rules").mkdir()
        (fake / "rules" / "bad.py").write_text(
            "import json\nimport yaml\nfrom appliance_cli.errors import UsageError\n"
        )
        (fake / "bundle").mkdir()
        (fake / "bundle" / "bad.py").write_text(
            "import importlib.util\nimport sys\nfrom ..core import x\n"
            "s = importlib.util.spec_from_file_location('m', 'roles/x.py')\nsys.path.insert(0, 'roles')\n"
        )
        PKG = fake
        assert violations() == [
            "appliance_cli/bundle/bad.py:4: spec_from_file_location (loads code the import DAG cannot see)",
            "appliance_cli/bundle/bad.py:5: sys.path (loads code the import DAG cannot see)",
            "appliance_cli/bundle/bad.py:3: relative import ..core (write it absolute)",
            "appliance_cli/core/bad.py:4: core imports cli (appliance_cli.cli)",
            "appliance_cli/core/bad.py:5: imports rich",
            "appliance_cli/rules/bad.py:2: rules imports yaml (the standard library only)",
            "appliance_cli/rules/bad.py:3: rules imports appliance_cli.errors (the standard library only)",
        ]
    finally:
        PKG = saved


def test_a_filter_or_action_plugin_past_the_rules_is_reported(tmp_path: Path) -> None:
    plugins = tmp_path / "roles" / "r" / "filter_plugins"
    plugins.mkdir(parents=True)
    (plugins / "ok.py").write_text(
        "from appliance_cli.rules.images import in_registry\nfrom appliance_cli import rules\n"
    )
    (plugins / "bad.py").write_text(
        "from appliance_cli.core import upgradeplan\nimport ansible_runner\nfrom appliance_cli import cli\n"
        "import runpy\nrunpy.run_path('x.py')\n"
    )
    actions = tmp_path / "roles" / "r" / "action_plugins"
    actions.mkdir()
    (actions / "act.py").write_text(
        "from ansible.plugins.action import ActionBase\nfrom appliance_cli.lab import state\n"
    )
    assert filter_plugin_violations(tmp_path / "roles") == [
        "roles/r/action_plugins/act.py:2: imports appliance_cli.lab (plugins: appliance_cli.rules only)",
        "roles/r/filter_plugins/bad.py:5: run_path (loads code the import DAG cannot see)",
        "roles/r/filter_plugins/bad.py:1: imports appliance_cli.core (plugins: appliance_cli.rules only)",
        "roles/r/filter_plugins/bad.py:2: imports ansible_runner",
        "roles/r/filter_plugins/bad.py:3: imports appliance_cli.cli (plugins: appliance_cli.rules only)",
    ]


# cli/ parses, renders and maps exit codes; the work, commands on nodes included, is core's. So cli/
# neither imports core.remote nor names its runners (a re-export elsewhere would pass the import
# rule), nor starts a process. Importing subprocess for its exception types stays allowed
# (diagnose_cmd catches SubprocessError that core raises).
REMOTE_MODULE = "appliance_cli.core.remote"
REMOTE_NAMES = {"run_on", "ssh_argv", "remote_command", "ssh_transport"}
SPAWNS = {
    "subprocess": {"run", "Popen", "call", "check_call", "check_output", "getoutput", "getstatusoutput"},
    "os": {"system", "popen", "fork", "forkpty", "execv", "execve", "execvp", "execvpe", "execl", "execle",
           "execlp", "execlpe", "spawnv", "spawnve", "spawnvp", "spawnvpe", "spawnl", "spawnle", "spawnlp",
           "spawnlpe", "posix_spawn", "posix_spawnp"},
    "pty": {"spawn"},
    "asyncio": {"create_subprocess_exec", "create_subprocess_shell"},
}  # fmt: skip
# Each exception, narrow (file, name), with why. Deleting one makes test_cli_runs_no_command fail.
CLI_EXCEPTIONS = {
    ("cli/lab_cmd.py", "os.execvp"): "`lab ssh` hands the user's terminal to ssh (the process is "
    "replaced): an interactive session, not a command the CLI runs and reads",
    ("cli/lab_cmd.py", "ssh_argv"): "lab.ssh_argv (the lab's own ssh config, not core.remote's): the "
    "argv that `lab ssh` execs",
}


def _commands_run(path: Path) -> list[tuple[int, str]]:
    """(line, what) of each way `path` could run a command itself."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.startswith(REMOTE_MODULE)]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [a.name for a in node.names]
            if node.module.startswith(REMOTE_MODULE) or (
                node.module == "appliance_cli.core" and "remote" in names
            ):
                out.append((node.lineno, REMOTE_MODULE))
            out += [(node.lineno, n) for n in names if n in REMOTE_NAMES]
            out += [(node.lineno, f"{node.module}.{n}") for n in names if n in SPAWNS.get(node.module, ())]
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.attr in SPAWNS.get(node.value.id, ())
        ):
            out.append((node.lineno, f"{node.value.id}.{node.attr}"))
        name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
        if name in REMOTE_NAMES:
            out.append((node.lineno, name))
    return sorted(set(out))


def cli_command_violations(
    pkg: Path | None = None, exceptions: dict[tuple[str, str], str] = CLI_EXCEPTIONS
) -> list[str]:
    root = pkg or PKG
    found = []
    for path in sorted((root / "cli").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        found += [
            f"appliance_cli/{rel}:{line}: {what} (cli/ runs no command: that is core's)"
            for line, what in _commands_run(path)
            if (rel, what) not in exceptions
        ]
    return found


def test_cli_runs_no_command() -> None:
    found = cli_command_violations()
    assert not found, "\n".join(["cli/ runs a command itself (move it into core/):", *found])


def test_each_cli_exception_is_needed() -> None:
    for key in CLI_EXCEPTIONS:
        rest = {k: v for k, v in CLI_EXCEPTIONS.items() if k != key}
        assert cli_command_violations(exceptions=rest), f"exception {key} is not needed: remove it"


def test_a_cli_module_running_commands_is_reported(tmp_path: Path) -> None:
    cli = tmp_path / "appliance_cli" / "cli"
    cli.mkdir(parents=True)
    (cli / "ok.py").write_text(
        "import subprocess\nfrom appliance_cli.core import cluster, nodeops\n"
        "try:\n    nodeops.reset(1, 2)\nexcept subprocess.SubprocessError:\n    pass\n"
    )
    (cli / "bad.py").write_text(
        "from appliance_cli.core.remote import run_on\nfrom appliance_cli.core import remote, cluster\n"
        "import appliance_cli.core.remote as r\nimport subprocess, os\nfrom subprocess import check_output\n"
        "cluster.run_on(1, 2, ['true'])\nsubprocess.run(['ssh', 'x'])\nos.execvp('ssh', ['ssh'])\n"
    )
    why = "(cli/ runs no command: that is core's)"
    assert cli_command_violations(tmp_path / "appliance_cli") == [
        f"appliance_cli/cli/bad.py:{line}: {what} {why}"
        for line, what in [
            (1, "appliance_cli.core.remote"), (1, "run_on"), (2, "appliance_cli.core.remote"),
            (3, "appliance_cli.core.remote"), (5, "subprocess.check_output"), (6, "run_on"),
            (7, "subprocess.run"), (8, "os.execvp"),
        ]
    ]  # fmt: skip


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


STANDIN = PKG.parent / "tests" / "standin" / "k8s_standin"
# What the stand-in may import: the standard library, PyYAML (as kubeadm and helm parse YAML),
# jsonschema (helm's values.schema.json check; Debian's python3-jsonschema), and itself. Never the product (appliance_cli, module_utils, a role's plugins): a rule copied from the
# product would agree with the product's bug (issue 29, item 4).
STANDIN_THIRD_PARTY = {"yaml", "jsonschema"}


def test_the_standin_imports_nothing_of_the_product() -> None:
    found = []
    for path in sorted(STANDIN.rglob("*.py")):
        rel = path.relative_to(PKG.parent)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "import_module":
                # importlib.import_module: only the stand-in's own modules (relative to __package__)
                if "__package__" not in ast.unparse(node):
                    found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
            elif isinstance(node, ast.Attribute) and ast.unparse(node) in (
                "importlib.util.spec_from_file_location",
                "sys.path",
            ):
                found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in STANDIN_THIRD_PARTY:
                    found.append(f"{rel}:{node.lineno}: import {name}")
    assert found == []
