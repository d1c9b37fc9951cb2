"""Run one command on a node over SSH with the site's settings (verified host keys, key, proxy)."""

from __future__ import annotations

import subprocess

from appliance_cli.core.siteconfig import Jumpbox, Node, SiteConfig
from appliance_cli.errors import ApplianceError, Unreachable


def ssh_argv(
    cfg: SiteConfig, node: Node | Jumpbox, command: list[str] | str, host_key_options: list[str] | None = None
) -> list[str]:
    """`host_key_options` replaces the strict known_hosts check only for `hosts trust`, which reads
    a key into a scratch file to show its fingerprint before anything is recorded. The jumpbox
    (not a node) may have a user of its own."""
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
    user = (node.user if isinstance(node, Jumpbox) else None) or cfg.ssh.user
    remote = command if isinstance(command, str) else " ".join(command)
    if user != "root":
        remote = f"sudo -n {remote}"
    return [*argv, f"{user}@{node.address}", remote]


class RemoteFailed(ApplianceError):
    """The command ran on the node and failed; `stderr` is what it said."""

    def __init__(self, message: str, stderr: str):
        super().__init__(message)
        self.stderr = stderr


SSH_CONNECTION_FAILED = 255  # ssh's own exit code when it could not connect or authenticate


def run_on(cfg: SiteConfig, node: Node, command: list[str] | str, timeout: int = 60) -> str:
    shown = command if isinstance(command, str) else " ".join(command)
    try:
        r = subprocess.run(ssh_argv(cfg, node, command), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise Unreachable(
            f"{node.name} ({node.address}): no answer within {timeout}s",
            hint="check that the node is up and reachable",
        ) from None
    last = (r.stderr.strip().splitlines() or ["(no output)"])[-1]
    if r.returncode == SSH_CONNECTION_FAILED and not r.stdout:
        if "Host key verification failed" in r.stderr or "REMOTE HOST IDENTIFICATION" in r.stderr:
            raise ApplianceError(
                f"{node.name} ({node.address}): its SSH host key does not match the recorded one",
                hint="if the node was reinstalled, check it, then `appliance hosts trust` records the new key",
            )
        raise Unreachable(
            f"{node.name} ({node.address}): SSH cannot connect: {last}",
            hint="check the node is up, its address, and the network path (ssh.proxy_command)",
        )
    if r.returncode != 0:
        raise RemoteFailed(f"{node.name}: `{shown}` failed (rc={r.returncode}): {last}", r.stderr)
    return r.stdout
