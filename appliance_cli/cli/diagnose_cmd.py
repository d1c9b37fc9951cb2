"""`appliance diagnose` (the AOU) and `appliance report compare`."""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

from rich.table import Table
from rich.text import Text

from appliance_cli.cli import ui
from appliance_cli.cli.preflight_cmd import add_report_args, write_reports
from appliance_cli.cli.site_cmd import add_site_arg, resolve_site_arg
from appliance_cli.core import knownhosts, sitelock
from appliance_cli.core.checks.compare import DEFAULT_THRESHOLD, Delta, compare
from appliance_cli.core.checks.diagnose import run_diagnose
from appliance_cli.core.checks.model import Report, Status
from appliance_cli.core.siteconfig import SiteConfig, load_site
from appliance_cli.errors import ApplianceError, Degraded, UsageError

_STYLE = {Status.PASS: "green", Status.WARN: "yellow", Status.FAIL: "bold red", Status.SKIP: "dim"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("diagnose", help="measure every layer on every node and name the bottleneck (the AOU)")
    add_site_arg(p)
    p.add_argument(
        "--quick", action="store_true", help="smaller samples (64 MB, 0.5 s of network): a few seconds a node"
    )
    p.add_argument(
        "--baseline",
        metavar="JSON",
        help="compare with an earlier report (diagnose --json) and flag regressions",
    )
    add_report_args(p, html=True)
    p.set_defaults(handler=cmd_diagnose)

    r = sub.add_parser("report", help="work with diagnose reports")
    rsub = r.add_subparsers(dest="report_command", metavar="ACTION", required=True)
    c = rsub.add_parser("compare", help="head to head: per-layer, per-node deltas between two reports")
    c.add_argument("before", metavar="A.json")
    c.add_argument("after", metavar="B.json")
    c.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD,
                   help=f"relative change counted as a regression (default {DEFAULT_THRESHOLD})")  # fmt: skip
    c.set_defaults(handler=cmd_compare)


QUICK_MB, QUICK_SECONDS = 64, 0.5  # --quick, and the diagnose at the end of `appliance install`


def summary(report: Report) -> str:
    c = report.counts()
    nodes = len({r.node for r in report.results} - {"site"})
    again = (f"; {report.remeasured} below its threshold measured again side by side with a peer, "
             f"{report.cleared} cleared" if report.remeasured else "")  # fmt: skip
    return (f"diagnose {report.site}: {c['pass']} passed, {c['warn']} warnings, {c['fail']} failed, "
            f"{c['skip']} skipped on {ui.count(nodes, 'node')} in {report.seconds:.1f}s{again}")  # fmt: skip


def bottleneck_line(report: Report) -> str:
    b = report.bottleneck
    return (f"bottleneck: {b.layer} on {b.node}: {b.check} {b.value} (expected {b.expected})" if b else
            "bottleneck: none (every measurement within its peers and its class)")  # fmt: skip


def quick_after_install(cfg: SiteConfig) -> Report | None:
    """`appliance install`'s last step: a quick diagnose, its summary, what is not well (as
    warnings) and the bottleneck. The install has succeeded: nothing here may fail it, so a
    diagnose that cannot run is a warning too."""
    ui.info("quick diagnose (skip it with --skip-diagnose)…")
    try:
        # no probe pods during an install: `appliance diagnose` measures the pod path
        report = run_diagnose(cfg, mb=QUICK_MB, seconds=QUICK_SECONDS, pod_path=False)
    except (ApplianceError, OSError, subprocess.SubprocessError) as exc:
        why = exc.message if isinstance(exc, ApplianceError) else f"{type(exc).__name__}: {exc}"
        ui.warn(f"quick diagnose did not run: {why} (the install itself succeeded; "
                f"`appliance diagnose --site {cfg.site_dir}` retries it)")  # fmt: skip
        return None
    ui.info(summary(report))
    for r in report.results:
        if r.status in (Status.FAIL, Status.WARN):
            ui.warn(
                f"{r.node}: {r.layer}/{r.check}: {r.value} (expected {r.expected})"
                + (f" — {r.hint}" if r.hint else "")
            )
    ui.info(bottleneck_line(report))
    return report


def show(report: Report) -> None:
    nodes = sorted({r.node for r in report.results})
    metrics = sorted({(r.layer, r.check) for r in report.results})
    table = Table(title=f"diagnose {report.site} ({report.seconds:.1f}s)", title_justify="left")
    table.add_column("layer / check")
    for n in nodes:
        table.add_column(n)
    for layer, check in metrics:
        cells = {r.node: r for r in report.results if (r.layer, r.check) == (layer, check)}
        table.add_row(f"{layer} / {check}", *(
            Text(ui.visible(f"{c.value or c.status}", lines=False), style=_STYLE[c.status]) if (c := cells.get(n)) else ""
            for n in nodes))  # fmt: skip
    ui.out.print(table)
    for r in report.results:
        if r.status in (Status.FAIL, Status.WARN):
            line = f"{r.node}: {r.layer}/{r.check}: {r.value} (expected {r.expected})" + (
                f" — {r.hint}" if r.hint else ""
            )
            (ui.warn if r.status is Status.WARN else ui.error)(line)
    ui.info(summary(report))
    ui.info(bottleneck_line(report))


def _load(path: str) -> Report:
    try:
        return Report.from_dict(json.loads(Path(path).read_text()))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(
            f"{path}: not a diagnose report ({exc})", hint="write one with `appliance diagnose --json FILE`"
        ) from None


def show_deltas(deltas: list[Delta], threshold: float) -> None:
    table = Table(title=f"compare (regression: worse by more than {threshold:.0%})", title_justify="left")
    for col in ("layer / check", "node", "before", "after", "change"):
        table.add_column(col)
    for d in deltas:
        style = "bold red" if d.regression else "green" if d.change > threshold else ""
        table.add_row(f"{d.layer} / {d.check}", d.node, f"{d.before:.1f} {d.unit}", f"{d.after:.1f} {d.unit}",
                      f"[{style}]{d.change:+.0%}{' REGRESSION' if d.regression else ''}[/]" if style else f"{d.change:+.0%}")  # fmt: skip
    ui.out.print(table)


def _regressions(deltas: list[Delta], threshold: float) -> None:
    show_deltas(deltas, threshold)
    bad = [d for d in deltas if d.regression]
    if bad:
        names = "; ".join(f"{d.node} {d.layer}/{d.check} {d.change:+.0%}" for d in bad)
        raise Degraded(f"{len(bad)} regression(s): {names}", hint="diagnose that layer on that node")
    ui.info(f"no regression beyond {threshold:.0%} in {len(deltas)} measurements")


def cmd_diagnose(args: argparse.Namespace) -> int:
    cfg = load_site(resolve_site_arg(args))
    knownhosts.require_host_keys(cfg)
    mb, seconds = (QUICK_MB, QUICK_SECONDS) if args.quick else (256, 1.0)
    # the lock: diagnose writes on every node and the share, and a run beside it skews both
    with sitelock.site_lock(cfg, "diagnose"):
        report = run_diagnose(cfg, mb=mb, seconds=seconds, on_layer=lambda s: ui.info(f"measuring {s}…"))
    show(report)
    write_reports(report, args)
    if args.baseline:
        _regressions(compare(_load(args.baseline), report), DEFAULT_THRESHOLD)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    _regressions(compare(_load(args.before), _load(args.after), args.threshold), args.threshold)
    return 0
