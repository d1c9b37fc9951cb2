"""The record of the last full install that succeeded, and the check that nothing changed since:
a no-op `appliance install` that needs no role to run.

After a full run of site.yml (no --check, --limit, --tags or --skip-tags) that succeeded, the
install records (runs/converged.json, atomically) a digest of what went into it (the product's
roles and playbooks, the rendered inventory and the site's files, the bundle manifest it was given)
and, per node, digests of the state the roles leave there (checks/statedigest.py: the trees they
write, dpkg's database, the service units, live sysctls, swap, NFS mounts, the CRI's images; on the
master also the cluster's nodes, objects and helm releases). The next full install reads every
node's digests again, side by side over SSH, one round trip each; when the inputs and every digest
are the same and the cluster is healthy, the roles are not run (`--full` runs them anyway). Any
playbook run other than check mode forgets the record first, so an interrupted or failed run, or
another command that changed the nodes, leaves none.

What it cannot see (README, "A no-op install"): state outside those parts, for example a file
the roles never wrote changed under a directory they do not own, or a running container's
process replaced behind the CRI's back."""

from __future__ import annotations

import hashlib
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

from appliance_cli import content
from appliance_cli.core import paths
from appliance_cli.core.inventory import render_inventory
from appliance_cli.core.remote import RemoteFailed, run_on
from appliance_cli.core.siteconfig import Node, SiteConfig
from appliance_cli.errors import ApplianceError
from appliance_cli.fsutil import atomic_write

RECORD = "converged.json"  # in the site's runs directory
SCHEMA = 1
PROBE_TIMEOUT_S = 60
# The trees the roles write on a node. "content": every file's sha256 (configuration, small);
# "stat": size and mtime (the bundle copy, the registry's storage, binaries: large, and written
# only by the roles). tests/unit/test_converged.py holds every absolute path in a role's defaults
# to one of these, or to NOT_WATCHED with its reason.
TREES: tuple[tuple[str, str], ...] = (
    ("/etc/appliance", "content"),
    ("/etc/apt", "content"),
    ("/etc/containerd", "content"),
    ("/etc/docker", "content"),
    ("/etc/kubernetes", "content"),
    ("/etc/cni", "content"),
    ("/etc/systemd/system", "content"),
    ("/etc/default", "content"),
    ("/etc/sysctl.d", "content"),
    ("/etc/modules-load.d", "content"),
    ("/etc/chrony", "content"),
    ("/etc/hosts", "content"),
    ("/etc/crictl.yaml", "content"),
    ("/etc/ansible/facts.d", "content"),
    ("/etc/bash_completion.d", "content"),
    ("/etc/ssl/certs", "content"),
    ("/usr/local/share/ca-certificates", "content"),
    ("/var/lib/kubelet/kubeadm-flags.env", "content"),
    ("/var/lib/apt/appliance-offline-index.done", "content"),
    ("/srv/appliance", "stat"),
    ("/var/lib/appliance", "stat"),
    ("/var/lib/docker-registry", "stat"),
    ("/var/lib/appliance-researcher-registry", "stat"),
    ("/var/cache/appliance", "stat"),
    ("/opt/cni/bin", "stat"),
    ("/usr/local/bin", "stat"),
)


def contract_trees() -> list[tuple[str, str]]:
    """The kubelet's files outside the trees above, from the paths contract (their one definition)."""
    return [(paths.load().kubelet_config, "content"), (paths.load().kubelet_auth, "content")]


# Paths in role defaults that are not state a no-op must see, and why.
NOT_WATCHED = {
    "/run": "runtime state, gone at reboot (sockets, locks, a restore's scratch)",
    "/var/lib/containerd": "the runtime's own store: its images are watched through the CRI",
    "/var/lib/etcd-restore-": "a restore's scratch data directory, removed when it ends",
    "/usr/bin": "binaries of Debian packages: watched through dpkg's database",
    "/usr/share/bash-completion": "a Debian package's file: watched through dpkg's database",
    "/media": "the USB stick the bundle is copied from: read, never written",
}


@dataclass(frozen=True)
class Look:
    """What the nodes said: each node's parts (a digest, or a mapping of entries), and what is
    unhealthy now."""

    nodes: dict[str, dict[str, object]]
    unhealthy: list[str]


def record_path(runs: Path) -> Path:
    """RUNS: the site's runs directory (core/install.py's runs_dir)."""
    return runs / RECORD


def forget(runs: Path) -> None:
    """Before any run that may change a node: no record outlives a run that did not finish."""
    record_path(runs).unlink(missing_ok=True)


def _tree_digest(root: Path, patterns: tuple[str, ...]) -> list[str]:
    out = []
    for pattern in patterns:
        for p in sorted(root.glob(pattern)):
            rel = p.relative_to(root)
            if any(x.startswith(".") or x == "__pycache__" for x in rel.parts) or p.suffix == ".pyc":
                continue  # locks, caches, bytecode: not what a run is made from
            if p.is_file() and not p.is_symlink():
                out.append(f"{rel} {hashlib.sha256(p.read_bytes()).hexdigest()}")
    return out


def inputs_digest(cfg: SiteConfig, extravars: dict[str, str]) -> str:
    """What a run of site.yml is made from: the product's Ansible content, the site directory's
    own files (appliance.yml, the rendered inventory, group and host vars, keys and certificates
    kept there; not runs/), the files the site names elsewhere, and the extra vars. The inventory is
    rendered first, as the run renders it (unchanged files are not rewritten)."""
    render_inventory(cfg)
    lines = _tree_digest(content.content_root(), ("ansible.cfg", "playbooks/**/*", "roles/**/*", "templates/**/*",
                                                         "module_utils/**/*"))  # fmt: skip
    site = cfg.site_dir
    lines += [f"site/{x}" for x in _tree_digest(site, ("*", "group_vars/**/*", "host_vars/**/*"))]
    named = [cfg.site.tls.certificate, cfg.site.tls.key, cfg.site.tls.ca] if cfg.site.tls else []
    named += [u.password_file for u in cfg.researcher_registry.users] if cfg.researcher_registry else []
    for name in named:
        if name:
            p = cfg.resolve(str(name))
            lines.append(f"named/{p} {hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else '-'}")
    lines.append("extravars " + json.dumps(extravars, sort_keys=True))
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def _spec(cfg: SiteConfig, node: Node) -> str:
    bundle = str(cfg.bundle.path)
    inside = any(bundle == root or bundle.startswith(root.rstrip("/") + "/") for root, _ in TREES)
    trees = [*TREES, *contract_trees(), *([] if inside else [(bundle, "stat")])]
    cluster = {"kubeconfig": paths.load().admin_conf} if node.name == cfg.master.name else None
    return json.dumps({"trees": trees, "cluster": cluster})


def look(cfg: SiteConfig) -> Look:
    """Every node's digests, side by side; ApplianceError naming the node that did not answer."""
    script = Path(str(files("appliance_cli.core.checks") / "statedigest.py")).read_text()

    def one(node: Node) -> dict[str, Any]:
        try:
            out = run_on(cfg, node, ["python3", "-", _spec(cfg, node)], timeout=PROBE_TIMEOUT_S, stdin=script)
        except RemoteFailed as exc:  # its last line, not the command line (the spec is long)
            why = (exc.stderr.strip().splitlines() or ["no output"])[-1]
            raise ApplianceError(f"{node.name}: its state could not be read: {why}") from None
        try:
            answer = json.loads(out)
        except ValueError:
            answer = None
        if not (
            isinstance(answer, dict)
            and isinstance(answer.get("parts"), dict)
            and isinstance(answer.get("unhealthy"), list)
        ):
            raise ApplianceError(f"{node.name}: the state digest printed no JSON object: {out[-200:]!r}")
        return answer

    with ThreadPoolExecutor(max_workers=min(16, len(cfg.nodes))) as pool:
        answers = dict(zip((n.name for n in cfg.nodes), pool.map(one, cfg.nodes), strict=True))
    return Look(
        nodes={name: a["parts"] for name, a in answers.items()},
        unhealthy=[line for a in answers.values() for line in a["unhealthy"]],
    )


def load(runs: Path) -> dict[str, Any] | None:
    """The record, or None when there is none (or one this toolkit cannot read: the roles run)."""
    try:
        record = json.loads(record_path(runs).read_text())
    except (OSError, ValueError):
        return None
    if (
        not isinstance(record, dict)
        or record.get("schema") != SCHEMA
        or not isinstance(record.get("nodes"), dict)
    ):
        return None
    return record


def differences(record: dict[str, Any] | None, inputs: str, cfg: SiteConfig, seen: Look | None) -> list[str]:
    """Why the roles must run, in words ([]: nothing changed since the record's full install).
    `seen` None: the record and the inputs alone (before the nodes are asked)."""
    if record is None:
        return ["no full install is recorded as finished"]
    if record.get("inputs") != inputs:
        return ["the site config, the bundle or the toolkit changed since the last full install"]
    if set(record["nodes"]) != {n.name for n in cfg.nodes}:
        return ["the site's nodes changed since the last full install"]
    if seen is None:
        return []
    out = []
    for name, parts in sorted(record["nodes"].items()):
        now = seen.nodes.get(name, {})
        changed = sorted(p for p in set(parts) | set(now) if not _same(parts.get(p), now.get(p)))
        if changed:
            out.append(f"{name}: {', '.join(changed)} changed since the last full install")
    return out + seen.unhealthy


def _same(then: object, now: object) -> bool:
    """A digest is the same as a whole; a mapping (images, objects, releases) keeps every recorded
    entry as it was, and may have more."""
    if isinstance(then, dict) and isinstance(now, dict):
        return all(now.get(k) == v for k, v in then.items())
    return then == now


def unchanged(cfg: SiteConfig, runs: Path, inputs: str) -> tuple[dict[str, Any], list[str]]:
    """(the record, why the roles must run): [] when the inputs are the record's, every node's
    digests too, and the cluster is healthy. A node that cannot be read is a reason, not an error:
    the roles' run then names it as the install always has."""
    record = load(runs)
    why = differences(record, inputs, cfg, None)
    if why:
        return record or {}, why
    try:
        seen = look(cfg)
    except ApplianceError as exc:
        return record or {}, [f"the nodes' state could not be read ({exc})"]
    return record or {}, differences(record, inputs, cfg, seen)


def remember(cfg: SiteConfig, runs: Path, inputs: str) -> str | None:
    """After a full run that succeeded: each node's digests, recorded for the next install. A
    warning (the next install runs the roles) when they cannot be read or the cluster is not
    healthy yet; None when recorded."""
    try:
        seen = look(cfg)
    except ApplianceError as exc:
        return f"the next install runs every role again: the nodes' state could not be recorded ({exc})"
    if seen.unhealthy:
        return f"the next install runs every role again: {'; '.join(seen.unhealthy)}"
    record = {
        "schema": SCHEMA,
        "at": time.strftime("%Y-%m-%d %H:%M:%S"),
        "inputs": inputs,
        "nodes": seen.nodes,
    }
    runs.mkdir(parents=True, exist_ok=True)
    atomic_write(record_path(runs), json.dumps(record, indent=1, sort_keys=True) + "\n", mode=0o600)
    return None
