"""`appliance user kubeconfig NAME --project P`: a researcher's kubeconfig (no admin credentials)."""

from __future__ import annotations

import argparse
from pathlib import Path

from appliance_cli.cli import ui
from appliance_cli.cli.cluster_cmd import write_private
from appliance_cli.cli.site_cmd import add_site_arg, resolve_site_arg
from appliance_cli.core import cluster, researcher
from appliance_cli.core.siteconfig import load_site


def register(sub: argparse._SubParsersAction) -> None:
    u = sub.add_parser("user", help="researcher access: a researcher's kubeconfig")
    usub = u.add_subparsers(dest="user_command", metavar="ACTION", required=True)
    k = usub.add_parser(
        "kubeconfig",
        help="a researcher's kubeconfig for one project (OIDC login, the project's namespace; no admin credentials)",
    )
    k.add_argument("name", metavar="NAME", help="the researcher (names the context)")
    k.add_argument("--project", required=True, metavar="P", help="one of scheduler.projects")
    add_site_arg(k)
    k.add_argument("--out", metavar="FILE", help="write to FILE (mode 0600) instead of printing")
    k.set_defaults(handler=cmd_user_kubeconfig)


def cmd_user_kubeconfig(args: argparse.Namespace) -> int:
    cfg = load_site(resolve_site_arg(args))
    researcher.check_request(cfg, args.name, args.project)  # refuse before contacting the master
    text = researcher.researcher_kubeconfig(cfg, args.name, args.project, cluster.admin_kubeconfig(cfg))
    if not args.out:
        ui.out.out(text, end="", highlight=False)
        return 0
    out = Path(args.out)
    write_private(out, text)
    ns = researcher.project_namespace(cfg, args.project)
    login = "runai login" if cfg.scheduler.stack == "runai" else "your identity provider's login"
    ui.info(f"wrote {out} (mode 0600) for {args.name} in namespace {ns}; give it to the researcher "
            f"as ~/.kube/config (or KUBECONFIG={out.name}), then {login}")  # fmt: skip
    return 0
