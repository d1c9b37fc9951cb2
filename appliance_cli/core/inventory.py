"""Render a validated site config into an Ansible inventory + group_vars next to it.

The rendered files are derived data: they are rewritten on every run from appliance.yml,
and the roles read everything from them (role defaults map `appliance_*` into role variables).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from appliance_cli.content import templates_dir
from appliance_cli.core.siteconfig import SiteConfig, oidc_settings, site_gpus
from appliance_cli.fsutil import write_if_changed

# Ansible group per node role (roles may contain '-', groups should not).
ROLE_GROUPS = {
    "master": "masters",
    "runai-system": "runai_system",
    "gpu-worker": "gpu_workers",
    "cpu-worker": "cpu_workers",
}


@dataclass(frozen=True)
class RenderedInventory:
    hosts_file: Path
    group_vars_file: Path
    known_hosts: Path


def _env() -> Environment:
    env = Environment(
        loader=FileSystemLoader(str(templates_dir())),
        undefined=StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["quote"] = yaml_quote
    return env


def yaml_quote(value: object) -> str:
    """`value` as one YAML double-quoted scalar, everything outside printable ASCII escaped: a value
    can end neither its quotes nor its line, whatever it holds."""
    out = []
    for ch in str(value):
        o = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 0x20 <= o < 0x7F:
            out.append(ch)
        else:
            out.append(f"\\x{o:02x}" if o <= 0xFF else f"\\u{o:04x}" if o <= 0xFFFF else f"\\U{o:08x}")
    return '"' + "".join(out) + '"'


def ssh_common_args(cfg: SiteConfig) -> str:
    """Host keys are always verified: against the site's known_hosts, never disabled."""
    args = [
        "-o",
        f"UserKnownHostsFile={cfg.resolve(cfg.ssh.known_hosts)}",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "LogLevel=ERROR",
    ]
    if cfg.ssh.proxy_command:
        args += ["-o", f"ProxyCommand={cfg.ssh.proxy_command}"]
    return shlex.join(args)


def groups(cfg: SiteConfig) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {g: [] for g in ROLE_GROUPS.values()}
    out["workers"] = []
    for node in cfg.nodes:
        for role in node.roles:
            out[ROLE_GROUPS[role]].append(node.name)
        if "master" not in node.roles:
            out["workers"].append(node.name)
    return out


def render_inventory(cfg: SiteConfig, out_dir: Path | None = None) -> RenderedInventory:
    out_dir = out_dir or cfg.site_dir
    env = _env()
    ctx = {
        "cfg": cfg,
        "groups": groups(cfg),
        "ssh_common_args": ssh_common_args(cfg),
        "private_key": str(cfg.resolve(cfg.ssh.private_key)) if cfg.ssh.private_key else None,
        "site_file": str(cfg.source) if cfg.source else "appliance.yml",
        "oidc": oidc_settings(cfg),
        "site_gpus": site_gpus(cfg),
        "departments": [d.model_dump() for d in cfg.scheduler.departments],
        "projects": [p.model_dump() for p in cfg.scheduler.projects],
        "site_tls": (
            {f: str(cfg.resolve(getattr(cfg.site.tls, f))) for f in ("certificate", "key", "ca")}
            if cfg.site.tls
            else {}
        ),
        "registry_users": (
            {u.name: str(cfg.resolve(u.password_file)) for u in cfg.researcher_registry.users}
            if cfg.researcher_registry
            else {}
        ),
    }
    hosts = out_dir / "hosts.yml"
    gv = out_dir / "group_vars" / "all" / "00-site.yml"
    gv.parent.mkdir(parents=True, exist_ok=True)
    write_if_changed(hosts, env.get_template("inventory/hosts.yml.j2").render(ctx))
    write_if_changed(gv, env.get_template("inventory/group_vars_all.yml.j2").render(ctx))
    return RenderedInventory(hosts, gv, cfg.resolve(cfg.ssh.known_hosts))
