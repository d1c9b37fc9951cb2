"""`appliance support-bundle`: one archive for vendor support, secrets scrubbed."""

from __future__ import annotations

import argparse
from pathlib import Path

from appliance_cli.cli import ui
from appliance_cli.cli.site_cmd import add_site_arg, resolve_site_arg
from appliance_cli.core import supportbundle
from appliance_cli.core.siteconfig import load_site


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "support-bundle",
        help="one archive for support: versions, site config, last runs, reports, journals, cluster state "
        "(secrets scrubbed)",
    )
    add_site_arg(p)
    p.add_argument("--out", metavar="DIR", default=".", help="directory for the archive (default: .)")
    p.add_argument(
        "--since",
        default="-24h",
        metavar="TIME",
        help="journal excerpts since TIME (journalctl --since; default -24h)",
    )
    p.set_defaults(handler=cmd_support_bundle)


def cmd_support_bundle(args: argparse.Namespace) -> int:
    cfg = load_site(resolve_site_arg(args))
    res = supportbundle.collect(cfg, Path(args.out), since=args.since)
    for name, why in res.unreachable.items():
        ui.warn(f"{name}: not collected: {why}")
    ui.info(f"wrote {res.path} ({ui.count(len(res.members), 'file')}, secrets scrubbed, mode 0600)")
    return 0
