"""The install service: site config → inventory → playbooks/site.yml through the runner port."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from appliance_cli.content import playbooks_dir
from appliance_cli.core.inventory import render_inventory
from appliance_cli.core.knownhosts import require_host_keys
from appliance_cli.core.ports import RunnerPort
from appliance_cli.core.siteconfig import SiteConfig
from appliance_cli.errors import BundleError, RunFailed
from appliance_cli.runner.events import Event, RunOptions, RunRequest, RunResult


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
        line, hint = _failure_line(result), f"artifacts and full log: {result.artifact_dir}"
        if result.failures and result.failures[0].kind == "bundle":  # caught while copying the stick
            raise BundleError(line, hint="the bundle on the stick differs from its signed manifest: rebuild or "
                              "re-copy it (appliance bundle verify names every bad blob); nothing was installed")  # fmt: skip
        raise RunFailed(line, hint=hint)
    return result


def _failure_line(result: RunResult) -> str:
    """One line: an unreachable node first (named once, with its address and the cause: a node
    that cannot be reached explains the failures that follow from it), else the first failure."""
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
