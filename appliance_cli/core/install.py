"""The install service: site config → inventory → playbooks/site.yml through the runner port."""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NoReturn

from appliance_cli.content import playbooks_dir
from appliance_cli.core import converged
from appliance_cli.core.inventory import render_inventory
from appliance_cli.core.knownhosts import require_host_keys
from appliance_cli.core.ports import RunnerPort
from appliance_cli.core.remote import run_on
from appliance_cli.core.siteconfig import Node, SiteConfig
from appliance_cli.errors import ApplianceError, BundleError, RunFailed, Unreachable
from appliance_cli.runner.events import Event, RunOptions, RunRequest, RunResult
from appliance_cli.runner.translate import CHECKSUM_KIND, GET_URL_CHECKSUM, LOST_MID_RUN


def runs_dir(cfg: SiteConfig) -> Path:
    return cfg.site_dir / "runs"


def run_playbook(
    runner: RunnerPort,
    cfg: SiteConfig,
    playbook: str,
    opts: RunOptions,
    on_event: Callable[[Event], None],
    extravars: dict[str, str] | None = None,
) -> RunResult:
    require_host_keys(cfg)
    if not opts.check:
        converged.forget(runs_dir(cfg))  # this run may change the nodes: the next install looks again
    inv = render_inventory(cfg)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    req = RunRequest(
        playbook=playbooks_dir() / playbook,
        inventory=inv.hosts_file,
        private_data_dir=runs_dir(cfg) / f"{stamp}-{Path(playbook).stem}",
        extravars=extravars or {},
        options=opts,
        mitogen=cfg.ssh.mitogen,
        node_names={n.address: n.name for n in cfg.nodes},
    )
    result = runner.run(req, on_event)
    if not result.ok:
        try:
            _raise_failure(cfg, playbook, result)
        except ApplianceError as exc:
            exc.run_result = result
            raise
    return result


def _raise_failure(cfg: SiteConfig, playbook: str, result: RunResult) -> NoReturn:
    """The failed run as one ApplianceError: its line, its exit code, its hint."""
    silent = _silent_nodes(cfg, result)
    line, hint = (_failure_line(result, silent), f"artifacts and full log: {result.artifact_dir}")
    lost = _lost_only(result, silent)
    if lost:  # every other node ran to the end: only the lost ones are behind
        again = (f"appliance install --site {shlex.quote(str(cfg.site_dir))} --limit {','.join(lost)}"
                 if playbook == "site.yml" else "the same command again")  # fmt: skip
        one = len(lost) == 1
        raise Unreachable(line, hint=f"the other nodes finished; once {', '.join(lost)} {'answers' if one else 'answer'} "
                          f"SSH again, {again} brings {'it' if one else 'them'} up to date ({hint})")  # fmt: skip
    if result.failures and result.failures[0].kind == "bundle":  # caught while copying the stick
        raise BundleError(line, hint="the bundle on the stick differs from its signed manifest: rebuild or "
                          "re-copy it (appliance bundle verify names every bad blob); nothing was installed")  # fmt: skip
    if result.failures and result.failures[0].kind == "bundle-copy":  # the master's copy went bad
        raise BundleError(line, hint="the bundle copy on the master changed after it was verified: remove the "
                          "file the line names and run `appliance install` again, which copies it again "
                          "from the stick")  # fmt: skip
    # a file fetched from the master's bundle copy is not what the manifest says
    checksum = bool(result.failures) and result.failures[0].kind == CHECKSUM_KIND
    corrupt = GET_URL_CHECKSUM.search(line) if checksum else None
    if corrupt:
        want, got, url = corrupt.group(2), corrupt.group(3), corrupt.group(1)
        host = result.failures[0].host
        raise BundleError(
            line[: corrupt.start()] + f"what the bundle copy served at {url} hashes to sha256:{got}, "
            f"not the manifest's sha256:{want} (corrupt on {host})" + line[corrupt.end() :],
            hint=f"a blob of the bundle copy on {host} changed after it was verified: remove "
            f"{cfg.bundle.path}/blobs/sha256/{want} there (the file's chunks, if the manifest splits it) "
            "and run `appliance install` again, which copies it again from the stick",
        )
    raise RunFailed(line, hint=hint)


def _lost_only(result: RunResult, silent: list[Node]) -> list[str]:
    """The nodes lost to the run, when losing them is all that went wrong (every failure is an
    unreachable node); else nothing (a failure of its own on a node that stayed is a failed run)."""
    if not result.failures or any(f.status != "unreachable" for f in result.failures):
        return []
    if silent:
        return [n.name for n in silent]
    return list(dict.fromkeys(f.host for f in result.failures))


def _silent_nodes(cfg: SiteConfig, result: RunResult) -> list[Node]:
    """When a connection died under a task and Ansible could not say whose (a task delegated to
    another node fails on the node that delegated it; a no_log task's result is censored, with no
    address): the nodes that do not answer SSH now."""
    lost = [
        f
        for f in result.failures
        if f.status == "unreachable" and (f.message.startswith(LOST_MID_RUN) or not f.address)
    ]
    if not lost or any(f.address for f in lost):
        return []

    def silent(node: Node) -> bool:
        try:
            run_on(cfg, node, ["true"], timeout=15)
        except ApplianceError:
            return True
        return False

    with ThreadPoolExecutor(max_workers=min(16, len(cfg.nodes))) as pool:
        return [n for n, down in zip(cfg.nodes, pool.map(silent, cfg.nodes), strict=True) if down]


def _failure_line(result: RunResult, silent: list[Node] | None = None) -> str:
    """One line: an unreachable node first (named once, with its address and the cause: a node
    that cannot be reached explains the failures that follow from it), else the first failure.
    `silent`: nodes found not answering after a connection died under a task."""
    if silent:
        f = next(f for f in result.failures if f.status == "unreachable")
        names = ", ".join(f"{n.name} ({n.address})" for n in silent)
        return f"{names} unreachable: {f.message} (task '{f.task}' on {f.host}; it does not answer SSH now)"
    unreachable = {f.host: f for f in reversed(result.failures) if f.status == "unreachable"}
    if unreachable:
        f = unreachable[next(f.host for f in result.failures if f.status == "unreachable")]
        others = len(unreachable) - 1
        more = (
            f" (+{others} more unreachable: {', '.join(h for h in unreachable if h != f.host)})"
            if others
            else ""
        )
        where = f" ({f.address})" if f.address and f.address != f.host else ""
        return f"{f.host}{where} unreachable: {f.message or 'no message'} (task '{f.task}'){more}"
    if result.failures:
        f = result.failures[0]
        more = f" (+{len(result.failures) - 1} more)" if len(result.failures) > 1 else ""
        return f"{f.host}: task '{f.task}' failed: {f.message or 'no message'}{more}"
    return f"ansible-playbook ended with status {result.status} (rc={result.rc})"


def install(
    runner: RunnerPort,
    cfg: SiteConfig,
    opts: RunOptions,
    on_event: Callable[[Event], None],
    extravars: dict[str, str] | None = None,
) -> RunResult:
    """site.yml; `extravars` carries what the bundle gate verified (appliance_bundle_manifest_sha256)."""
    return run_playbook(runner, cfg, "site.yml", opts, on_event, extravars=extravars)
