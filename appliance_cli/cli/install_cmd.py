"""`appliance install` and `appliance hosts trust`."""

from __future__ import annotations

import argparse
import sys

from appliance_cli.cli import diagnose_cmd, preflight_cmd, ui
from appliance_cli.cli.progress import TIMINGS_FILE, Progress, print_recap
from appliance_cli.cli.site_cmd import add_site_arg, resolve_site_arg
from appliance_cli.core import bundlegate, converged, knownhosts, sitelock
from appliance_cli.core.install import install, runs_dir
from appliance_cli.core.siteconfig import Jumpbox, Node, SiteConfig, load_site, site_warnings
from appliance_cli.errors import ApplianceError, ConfigError, UsageError
from appliance_cli.runner.events import RunOptions, RunResult

# --force reaches the scheduler_stack role as this extra var (roles/appliance_vars.yml)
FORCE_VAR = "appliance_delete_busy_projects"


def add_run_args(p: argparse.ArgumentParser) -> None:
    add_site_arg(p)
    p.add_argument("--check", action="store_true", help="dry run: report what would change")
    p.add_argument("--diff", action="store_true", help="show file differences")
    p.add_argument("--limit", metavar="HOSTS", help="only these nodes (ansible host pattern)")
    p.add_argument("--tags", metavar="TAGS", help="only tasks with these tags")
    p.add_argument("--skip-tags", metavar="TAGS", help="skip tasks with these tags")
    p.add_argument("-v", "--verbose", action="count", default=0, help="more ansible output in the artifacts")


def run_options(args: argparse.Namespace) -> RunOptions:
    return RunOptions(
        check=args.check,
        diff=args.diff,
        limit=args.limit,
        tags=args.tags,
        skip_tags=args.skip_tags,
        verbosity=args.verbose,
    )


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("install", help="install the appliance on the site's nodes (playbooks/site.yml)")
    add_run_args(p)
    p.add_argument(
        "--bundle",
        metavar="DIR",
        help="the offline bundle to verify and install from (default: the site config's bundle.source)",
    )
    p.add_argument(
        "--key",
        metavar="PUB",
        help="trusted public key of the bundle (default: $APPLIANCE_BUNDLE_PUBKEY, then bundle.public_key)",
    )
    p.add_argument(
        "--skip-preflight",
        action="store_true",
        help="install without running `appliance preflight` first (its failures are then found half-way)",
    )
    p.add_argument(
        "--skip-diagnose",
        action="store_true",
        help="do not end with a quick `appliance diagnose` (check-mode and partial runs, with --tags, "
        "--skip-tags or --limit, never do)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="delete the Run:ai projects gone from the site config even while jobs run in them "
        "(without it the install refuses, naming the jobs)",
    )
    p.add_argument(
        "--full",
        action="store_true",
        help="run every role even when nothing changed since the last full install (the install "
        "otherwise checks each node's state against that install's record and runs none)",
    )
    p.add_argument(
        "--no-verify-bundle",
        action="store_true",
        help="install without verifying the bundle (the master's existing copy is used as it is)",
    )
    p.set_defaults(handler=cmd_install)

    h = sub.add_parser("hosts", help="manage the nodes' SSH host keys")
    hsub = h.add_subparsers(dest="hosts_command", metavar="ACTION", required=True)
    t = hsub.add_parser("trust", help="show each node's host key fingerprint and record it in known_hosts")
    add_site_arg(t)
    t.add_argument(
        "--yes", action="store_true", help="record without asking (only after checking fingerprints)"
    )
    t.set_defaults(handler=cmd_trust)


def make_runner():
    from appliance_cli.runner.adapter import AnsibleRunner  # keeps ansible_runner out of the CLI's imports

    return AnsibleRunner()


def cmd_install(args: argparse.Namespace) -> int:
    cfg = load_site(resolve_site_arg(args))
    for warning in site_warnings(cfg):
        ui.warn(f"{cfg.source}: {warning}")
    from appliance_cli.core.checks import tls  # cryptography: not at CLI start-up

    refusals = tls.install_refusals(cfg)  # Run:ai's certificate, before any node is touched
    if refusals:
        raise ConfigError(refusals, hint=tls.refusal_hint(cfg))
    knownhosts.require_host_keys(cfg)
    if args.skip_preflight:
        ui.warn("preflight skipped (--skip-preflight): what it would have found fails the install half-way")
    elif not args.check:
        preflight_cmd.check_site(cfg, preflight_cmd.limit_from_pattern(cfg, args.limit), before_install=True)
    gate = bundlegate.check(cfg, bundle=args.bundle, key=args.key, skip=args.no_verify_bundle)
    ui.info(gate.summary)
    if gate.warning:
        ui.warn(gate.warning)
    full = not (args.limit or args.tags or args.skip_tags or args.check)  # every role on every node
    timings = (
        None if (args.limit or args.tags or args.check) else runs_dir(cfg) / TIMINGS_FILE
    )  # full runs only
    extravars = {**gate.extravars, **({FORCE_VAR: "true"} if args.force else {})}
    try:
        with sitelock.site_lock(cfg, "install"):
            inputs = converged.inputs_digest(cfg, extravars) if full else ""  # renders the inventory
            if full and not args.full:
                record, why = converged.unchanged(cfg, runs_dir(cfg), inputs)
                if not why:
                    ui.info(f"nothing changed since the full install of {record['at']} (the inputs and "
                            f"{ui.count(len(cfg.nodes), 'node')}' state, read again): no role was run "
                            "(`appliance install --full` runs them all)")  # fmt: skip
                    return _after(cfg, args)
                ui.info(f"the roles run: {'; '.join(why)}")
            with Progress(f"install {cfg.site.name}", timings=timings) as progress:
                result = install(make_runner(), cfg, run_options(args), progress, extravars=extravars)
            if full:
                note = converged.remember(cfg, runs_dir(cfg), inputs)  # what the next install compares with
                if note:
                    ui.warn(note)
    except ApplianceError as exc:
        if isinstance(exc.run_result, RunResult):  # what each node did, and the run's warnings, first
            print_recap(exc.run_result)
        raise
    progress.save_timings()
    print_recap(result)
    mode = " (check mode: nothing was changed)" if args.check else ""
    ui.info(
        f"install finished on {ui.count(len(result.stats), 'node')} in {result.elapsed:.1f}s, "
        f"changed={result.changed_total}{mode}"
    )
    return _after(cfg, args)


def _after(cfg: SiteConfig, args: argparse.Namespace) -> int:
    if not (args.check or args.skip_diagnose or args.limit or args.tags or args.skip_tags):
        diagnose_cmd.quick_after_install(cfg)  # warns, never fails the install that succeeded
    elif args.limit or args.tags or args.skip_tags:
        ui.info("a partial run: no quick diagnose (run `appliance diagnose` to measure the appliance)")
    return 0


def cmd_trust(args: argparse.Namespace) -> int:
    cfg = load_site(resolve_site_arg(args))
    # the controller's lock only: the master's needs the host keys this records
    with sitelock.controller_lock(cfg.site_dir, "hosts trust"):
        missing = knownhosts.missing_nodes(cfg)
        if not missing:
            hosts = knownhosts.ssh_hosts(cfg)
            what = ui.count(len(cfg.nodes), "node") + (
                " and the jumpbox" if len(hosts) > len(cfg.nodes) else ""
            )
            ui.info(f"all {what} already have a recorded host key")
            return 0
        trust_hosts(cfg, missing, args.yes)
    return 0


def trust_hosts(cfg: SiteConfig, hosts: list[Node | Jumpbox], yes: bool) -> None:
    """Show each host's key fingerprint and record it (asking first unless `yes`)."""
    for node in hosts:
        keys = knownhosts.scan(cfg, node)
        for k in keys:
            ui.info(f"{node.name} ({node.address}): {k.keytype} {k.fingerprint}")
        if not yes:
            if not sys.stdin.isatty():
                raise UsageError(
                    "not recording host keys without confirmation",
                    hint="compare the fingerprints with the node's console, then pass --yes",
                )
            answer = input(f"Does this match the key shown on {node.name}'s console? [y/N] ")
            if answer.strip().lower() not in ("y", "yes"):
                raise UsageError(f"host key of {node.name} not trusted; nothing recorded")
        path = knownhosts.record(cfg, keys)
        ui.info(f"recorded {node.name} in {path}")
