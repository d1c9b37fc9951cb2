"""Run one command on a node over SSH with the site's settings (verified host keys, key, proxy)."""

from __future__ import annotations

import subprocess

from appliance_cli.core.siteconfig import Node, SiteConfig
from appliance_cli.errors import ApplianceError


def ssh_argv(
    cfg: SiteConfig, node: Node, command: list[str] | str, host_key_options: list[str] | None = None
) -> list[str]:
    """`host_key_options` replaces the strict known_hosts check only for `hosts trust`, which reads
    a key into a scratch file to show its fingerprint before anything is recorded."""
    keys = host_key_options or [
        "-o",
        f"UserKnownHostsFile={cfg.resolve(cfg.ssh.known_hosts)}",
        "-o",
        "StrictHostKeyChecking=yes",
    ]
    argv = [
        "ssh",
        *keys,
        "-o",
        "BatchMode=yes",
        "-o",
        "ConnectTimeout=10",
        "-o",
        "LogLevel=ERROR",
        "-p",
        str(cfg.ssh.port),
    ]
    if cfg.ssh.proxy_command:
        argv += ["-o", f"ProxyCommand={cfg.ssh.proxy_command}"]
    if cfg.ssh.private_key:
        argv += ["-i", str(cfg.resolve(cfg.ssh.private_key))]
    remote = command if isinstance(command, str) else " ".join(command)
    if cfg.ssh.user != "root":
        remote = f"sudo -n {remote}"
    return [*argv, f"{cfg.ssh.user}@{node.address}", remote]


def run_on(cfg: SiteConfig, node: Node, command: list[str] | str, timeout: int = 60) -> str:
    try:
        r = subprocess.run(ssh_argv(cfg, node, command), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ApplianceError(
            f"{node.name}: no answer within {timeout}s", hint="check that the node is up and reachable"
        ) from None
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise ApplianceError(
            f"{node.name}: `{command if isinstance(command, str) else ' '.join(command)}` "
            f"failed (rc={r.returncode}): {last}"
        )
    return r.stdout
