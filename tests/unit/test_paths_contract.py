"""The paths contract (roles/appliance_paths/defaults/main.yml): each path on the nodes that the
CLI and the roles both read is written once, in that file; the CLI's constants and the roles'
defaults resolve to the same values; a site cannot move one through role_vars."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml

from appliance_cli.cli.main import main
from appliance_cli.core import backups, cluster, nodeops, paths, siteconfig, upgradestate
from appliance_cli.core.checks import diagnose, preflight
from appliance_cli.errors import ApplianceError

REPO = Path(__file__).resolve().parents[2]
CONTRACT_FILE = REPO / "roles" / "appliance_paths" / "defaults" / "main.yml"
CONTRACT = yaml.safe_load(CONTRACT_FILE.read_text())
EXAMPLE = REPO / "inventories" / "example" / "appliance.yml"
SCANNED = ("roles", "playbooks", "appliance_cli", "templates")
SUFFIXES = {".py", ".yml", ".yaml", ".j2", ".sh", ".cfg", ".toml", ".json"}

# The CLI's names for the contract's paths -> the contract variable each must equal.
CLI_CONSTANTS = {
    "cluster.ADMIN_CONF": (cluster.ADMIN_CONF, "appliance_paths_admin_conf"),
    "nodeops.KUBELET_CONF": (nodeops.KUBELET_CONF, "appliance_paths_kubelet_conf"),
    "diagnose.CONTAINERD_CONFIG": (diagnose.CONTAINERD_CONFIG, "appliance_paths_containerd_config"),
    "diagnose.KUBELET_AUTH": (diagnose.KUBELET_AUTH, "appliance_paths_kubelet_auth"),
    "preflight.REGISTRY_CA_TRUST": (preflight.REGISTRY_CA_TRUST, "appliance_paths_registry_ca"),
    "preflight.REGISTRY_PASSWORD_FILE": (
        preflight.REGISTRY_PASSWORD_FILE,
        "appliance_paths_registry_password",
    ),
    "upgradestate.STATE_FILE": (upgradestate.STATE_FILE, "appliance_paths_upgrade_state"),
    "upgradestate.CHART_VALUES_DIR": (upgradestate.CHART_VALUES_DIR, "appliance_paths_upgrade_values"),
    "backups.BACKUP_ROOT": (backups.BACKUP_ROOT, "appliance_paths_backups"),
    "backups.RESTORE_STATE_FILE": (backups.RESTORE_STATE_FILE, "appliance_paths_restore_state"),
    "preflight.DOCKER_DAEMON": (preflight.DOCKER_DAEMON, "appliance_paths_docker_daemon"),
    "preflight.KUBELET_CONFIG": (preflight.KUBELET_CONFIG, "appliance_paths_kubelet_config"),
    "preflight.CNI_CONF_DIR": (preflight.CNI_CONF_DIR, "appliance_paths_cni_conf_dir"),
}


def _code_lines(path: Path) -> list[tuple[int, str]]:
    """The file's lines without whole-line comments (a comment naming a path does not define it)."""
    return [
        (i, line)
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if not line.lstrip().startswith(("#", "{#"))
    ]


def definitions(path_value: str, roots: list[Path] | None = None) -> list[str]:
    """Every place outside comments and docs where `path_value` is written (a sub-path counts)."""
    literal = re.compile(re.escape(path_value) + r"(?![A-Za-z0-9_.-])")
    found = []
    for root in roots if roots is not None else [REPO / d for d in SCANNED]:
        for f in sorted(root.rglob("*")):
            rel = f.relative_to(root.parent)
            if (
                not f.is_file()
                or f.suffix not in SUFFIXES
                or "molecule" in rel.parts
                or "__pycache__" in rel.parts
            ):
                continue  # molecule scenarios are the roles' tests: they look at the node as a test does
            found += [f"{rel.as_posix()}:{i}" for i, line in _code_lines(f) if literal.search(line)]
    return found


@pytest.mark.parametrize("name", sorted(CONTRACT))
def test_each_contract_path_is_defined_once(name):
    where = definitions(CONTRACT[name])
    assert where == [f"roles/{CONTRACT_FILE.relative_to(REPO / 'roles').as_posix()}:{_line_of(name)}"]


def _line_of(name: str) -> int:
    return next(i for i, line in _code_lines(CONTRACT_FILE) if line.startswith(f"{name}:"))


def test_a_second_definition_is_caught(tmp_path):
    role = tmp_path / "roles" / "r" / "defaults"
    role.mkdir(parents=True)
    (role / "main.yml").write_text(
        "r_kubeconfig: /etc/kubernetes/admin.conf\n# r_old: /etc/kubernetes/admin.conf\nr_x: /etc/kubernetes/admin.confx\n"
    )
    assert definitions("/etc/kubernetes/admin.conf", [tmp_path / "roles"]) == ["roles/r/defaults/main.yml:1"]


def test_the_cli_reads_the_contract():
    assert {f"{paths.PREFIX}{k}": v for k, v in vars(paths.PATHS).items()} == CONTRACT
    assert {label: value for label, (value, _) in CLI_CONSTANTS.items()} == {
        label: CONTRACT[name] for label, (_, name) in CLI_CONSTANTS.items()
    }
    assert {name for _, name in CLI_CONSTANTS.values()} == set(CONTRACT)


def _role_defaults_resolved() -> dict[str, str]:
    """Every role default that takes its value from the contract, rendered by Ansible's own Templar
    with the contract and the role defaults as they load them (DataLoader: trusted templates)."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.plugins.loader import init_plugin_loader
    from ansible.template import Templar

    init_plugin_loader()
    loader = DataLoader()
    variables: dict = {}
    for f in sorted((REPO / "roles").glob("*/defaults/main.yml")):
        variables.update(loader.load_from_file(str(f), trusted_as_template=True) or {})  # as for defaults/
    templar = Templar(loader=loader, variables=variables)
    bound = siteconfig.contract_role_vars()
    return {name: templar.template(variables[name]) for name in bound if name not in CONTRACT}


def test_the_role_defaults_resolve_to_the_cli_values():
    resolved = _role_defaults_resolved()
    bound = siteconfig.contract_role_vars()
    want = {name: getattr(paths.PATHS, bound[name].removeprefix(paths.PREFIX)) for name in resolved}
    want["registry_auth_dir"] = os.path.dirname(paths.PATHS.registry_password)
    assert resolved == want
    # the eleven roles that use kubeadm's admin kubeconfig, and the pairs the CLI reads by name
    assert sum(1 for n in resolved if bound[n] == "appliance_paths_admin_conf") == 11
    assert resolved["registry_auth_password_file"] == preflight.REGISTRY_PASSWORD_FILE
    assert resolved["registry_ca_trust_path"] == resolved["container_runtime_registry_ca_path"]
    assert resolved["container_runtime_containerd_config_file"] == diagnose.CONTAINERD_CONFIG
    assert (
        resolved["kube_upgrade_state_file"] == resolved["chart_upgrade_state_file"] == upgradestate.STATE_FILE
    )
    assert resolved["etcd_restore_backup_root"] == resolved["cluster_backup_root"] == backups.BACKUP_ROOT


@pytest.mark.parametrize("role", sorted({p.parts[-3] for p in (REPO / "roles").glob("*/defaults/main.yml")}))
def test_a_role_that_reads_the_contract_depends_on_it(role):
    """The dependency is what loads the contract wherever the role runs (a play, include_role, a test)."""
    root = REPO / "roles" / role
    reads = role != "appliance_paths" and any(
        paths.PREFIX in line
        for f in root.rglob("*")
        if f.is_file() and f.suffix in (".yml", ".j2") and "molecule" not in f.parts
        for _, line in _code_lines(f)
    )
    deps = (yaml.safe_load((root / "meta" / "main.yml").read_text()) or {}).get("dependencies") or []
    assert ("appliance_paths" in deps) == reads


def _validate(tmp_path: Path, capsys, role_vars: dict) -> tuple[int, list[str]]:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["role_vars"] = role_vars
    f = tmp_path / "appliance.yml"
    f.write_text(yaml.safe_dump(data))
    rc = main(["config", "validate", "--site", str(f)])
    return rc, [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]


@pytest.mark.parametrize(
    ("name", "path"),
    [
        ("helm_kubeconfig", "/etc/kubernetes/admin.conf"),
        ("appliance_paths_admin_conf", "/etc/kubernetes/admin.conf"),
        ("kube_upgrade_state_file", "/var/lib/appliance/upgrade/state.json"),
        ("registry_auth_dir", "/etc/appliance/registry-auth/appliance.password"),
        ("container_runtime_containerd_config_file", "/etc/containerd/config.toml"),
    ],
)
def test_role_vars_that_move_a_contract_path_are_refused(tmp_path, capsys, name, path):
    rc, errors = _validate(tmp_path, capsys, {name: "/srv/elsewhere"})
    assert rc == 2 and len(errors) == 1
    assert errors[0].endswith(
        f"role_vars.{name}: not settable by a site: it would move {path}, which the appliance CLI reads "
        "too (the one definition: roles/appliance_paths/defaults/main.yml)"
    )


def test_every_role_var_bound_to_the_contract_is_refused():
    cfg = siteconfig.parse_site(yaml.safe_load(EXAMPLE.read_text()))
    bound = siteconfig.contract_role_vars()
    assert len(bound) > len(CONTRACT)
    problems = siteconfig._role_var_problems(cfg.model_copy(update={"role_vars": dict.fromkeys(bound, "/x")}))
    assert len(problems) == len(bound) and all("not settable by a site: it would move" in p for p in problems)


def test_a_role_var_beside_the_contract_stays_settable(tmp_path, capsys):
    rc, errors = _validate(tmp_path, capsys, {"registry_auth_username": "puller"})
    assert errors == [] and rc == 0


@pytest.mark.parametrize(
    ("data", "why"),
    [
        ({**CONTRACT, "appliance_paths_admin_conf": "etc/kubernetes/admin.conf"}, "is not an absolute path"),
        ({**CONTRACT, "appliance_paths_backups": "/var/lib/../backups"}, "is not an absolute path"),
        ({**CONTRACT, "appliance_paths_backups": "/var/lib/{{ x }}"}, "is not an absolute path"),
        ({k: v for k, v in CONTRACT.items() if k != "appliance_paths_backups"}, "on one side only"),
        ({**CONTRACT, "appliance_paths_extra": "/x"}, "on one side only"),
        (["/x"], "not a mapping"),
    ],
)
def test_a_malformed_contract_is_refused(data, why):
    with pytest.raises(ApplianceError, match=re.escape(why)):
        paths.parse(data)
