"""Run one command on a node over SSH with the site's settings (verified host keys, key, proxy)."""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Sequence

from appliance_cli.core.siteconfig import Jumpbox, Node, SiteConfig
from appliance_cli.errors import ApplianceError, Unreachable


def remote_command(command: Sequence[str], user: str) -> str:
    """The one string ssh hands the node's login shell for argv `command`: every word quoted
    (shlex.join), so a value reaches the node as one argument whatever it holds (`;`, `$()`,
    quotes, spaces, newlines); sudo covers the whole command. A shell feature a caller needs (a
    pipe, `||`) is written as `sh -c SCRIPT sh ARG...`, with the data as positional arguments."""
    if isinstance(command, str) or not command or not all(isinstance(w, str) for w in command):
        raise TypeError(f"a remote command is a non-empty list of strings, not {command!r}")
    if any("\0" in w for w in command):
        raise ValueError("a remote command cannot carry a NUL byte")
    return shlex.join(list(command) if user == "root" else ["sudo", "-n", "--", *command])


def ssh_argv(
    cfg: SiteConfig, node: Node | Jumpbox, command: Sequence[str], host_key_options: list[str] | None = None
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
    return [*argv, f"{user}@{node.address}", remote_command(command, user)]


class RemoteFailed(ApplianceError):
    """The command ran on the node and failed; `stderr` is what it said."""

    def __init__(self, message: str, stderr: str):
        super().__init__(message)
        self.stderr = stderr


SSH_CONNECTION_FAILED = 255  # ssh's own exit code when it could not connect or authenticate


def read_if_there(path: str) -> list[str]:
    """argv that prints the file at `path` on a node, and nothing (rc 0) when it is absent: for the
    state files an operation may not have written yet. The path is an argument, never shell text."""
    return ["sh", "-c", 'cat -- "$1" 2>/dev/null || true', "sh", path]


def run_on(
    cfg: SiteConfig, node: Node, command: Sequence[str], timeout: int = 60, stdin: str | None = None
) -> str:
    """`command` (argv) on the node; `stdin`: what it reads (a manifest, never the shell's text)."""
    argv = ssh_argv(cfg, node, command)  # a str command is refused here, before anything runs
    shown = shlex.join(command)
    try:
        r = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, input=stdin if stdin is not None else ""
        )
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
