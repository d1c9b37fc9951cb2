"""`appliance init`, `appliance config validate|render`, `appliance hosts trust`."""

from __future__ import annotations

import argparse
from pathlib import Path

from appliance_cli.cli import ui
from appliance_cli.core import sitefiles
from appliance_cli.core.checks import tls
from appliance_cli.core.inventory import render_inventory
from appliance_cli.core.siteconfig import load_site, site_warnings
from appliance_cli.errors import ConfigError, UsageError


def add_site_arg(p: argparse.ArgumentParser) -> None:
    """The site as `--site DIR` or positionally (`appliance config validate site/appliance.yml`),
    as ansible-playbook and kubectl users expect."""
    p.add_argument(
        "site_positional",
        nargs="?",
        metavar="SITE",
        help="site directory holding appliance.yml, or the file itself (same as --site)",
    )
    p.add_argument(
        "--site",
        metavar="DIR",
        help="site directory holding appliance.yml, or the file itself; 'lab' = the running rehearsal lab "
        "(default: current directory)",
    )


def resolve_site_arg(args: argparse.Namespace) -> Path:
    given = [v for v in (args.site_positional, args.site) if v is not None]
    if len(given) == 2 and given[0] != given[1]:
        raise UsageError(
            f"two sites given: '{given[0]}' and --site '{given[1]}'",
            hint="name the site once, either as SITE or with --site",
        )
    value = given[0] if given else "."
    if value == "lab":
        from appliance_cli.lab.layout import LabLayout  # the lab writes its own site directory

        return LabLayout.default().site_dir
    return Path(value)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("init", help="write a documented skeleton appliance.yml into DIR")
    p.add_argument("dir", nargs="?", default=".", help="site directory to create (default: .)")
    p.add_argument("--force", action="store_true", help="overwrite an existing appliance.yml")
    p.set_defaults(handler=cmd_init)

    cfg = sub.add_parser("config", help="check or render the site config")
    csub = cfg.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    v = csub.add_parser("validate", help="validate appliance.yml; one line per problem, exit 2 if any")
    add_site_arg(v)
    v.set_defaults(handler=cmd_validate)
    r = csub.add_parser("render", help="render hosts.yml and group_vars next to appliance.yml")
    add_site_arg(r)
    r.set_defaults(handler=cmd_render)


def cmd_init(args: argparse.Namespace) -> int:
    path = sitefiles.write_skeleton(Path(args.dir), force=args.force)
    ui.info(f"wrote {path}")
    ui.info(f"next: edit it, then `appliance config validate --site {path.parent}`")
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    cfg = load_site(resolve_site_arg(args))
    problems = tls.file_problems(cfg)  # the files it names, read (load_site reads appliance.yml only)
    if problems:
        raise ConfigError([f"{cfg.source}: {p}" for p in problems], hint="give PEM files readable here")
    roles: dict[str, int] = {}
    for n in cfg.nodes:
        for r in n.roles:
            roles[r] = roles.get(r, 0) + 1
    summary = ", ".join(f"{c} {r}" for r, c in roles.items())
    for warning in site_warnings(cfg):
        ui.warn(f"{cfg.source}: {warning}")
    removed = [n.name for n in cfg.removed_nodes]
    gone = f"; removed (left out of every run): {', '.join(removed)}" if removed else ""
    ui.info(f"{cfg.source}: valid — site '{cfg.site.name}', {len(cfg.nodes)} nodes ({summary}){gone}")
    return 0


def cmd_render(args: argparse.Namespace) -> int:
    cfg = load_site(resolve_site_arg(args))
    inv = render_inventory(cfg)
    ui.info(f"rendered {inv.hosts_file} and {inv.group_vars_file}")
    return 0
