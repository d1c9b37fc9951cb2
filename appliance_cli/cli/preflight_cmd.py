"""`appliance preflight`: every node probed at once, a node x layer grid that fills in on a
terminal, then the failures and warnings with their hints, and the reports asked for."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.live import Live
from rich.table import Table

from appliance_cli.cli import ui
from appliance_cli.cli.site_cmd import add_site_arg, resolve_site_arg
from appliance_cli.core import knownhosts
from appliance_cli.core.checks import report as reports
from appliance_cli.core.checks.model import LAYERS, CheckResult, Report, Status
from appliance_cli.core.checks.preflight import run_preflight
from appliance_cli.core.siteconfig import SiteConfig, load_site
from appliance_cli.errors import PrerequisiteError, UsageError

_MARK = {
    Status.PASS: "[green]ok[/]",
    Status.WARN: "[yellow]warn[/]",
    Status.FAIL: "[bold red]FAIL[/]",
    Status.SKIP: "[dim]skip[/]",
}
_RANK = {Status.FAIL: 3, Status.WARN: 2, Status.PASS: 1, Status.SKIP: 0}


def add_report_args(p: argparse.ArgumentParser, html: bool = False) -> None:
    if html:
        p.add_argument(
            "--html",
            metavar="FILE",
            help="write one self-contained HTML report (tables, plots; opens offline)",
        )
    p.add_argument("--json", metavar="FILE", help="write every result as JSON")
    p.add_argument(
        "--junit", metavar="FILE", help="write a JUnit XML report (one testcase per check and node)"
    )
    p.add_argument("--text", metavar="FILE", help="write the plain-text report for vendor support")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("preflight", help="check every node before (or after) an install; changes nothing")
    add_site_arg(p)
    p.add_argument("--limit", metavar="NODES", help="comma-separated node names (default: every node)")
    add_report_args(p)
    p.set_defaults(handler=cmd_preflight)


class Grid:
    """Node x layer, each cell the worst status seen so far."""

    def __init__(self, cfg: SiteConfig, nodes: list[str]):
        self.title = f"preflight {cfg.site.name}"
        self.rows = [*nodes, "site"]
        self.cells: dict[tuple[str, str], Status] = {}

    def add(self, r: CheckResult) -> None:
        key = (r.node, r.layer)
        if key not in self.cells or _RANK[r.status] > _RANK[self.cells[key]]:
            self.cells[key] = r.status

    def render(self) -> Table:
        layers = [layer for layer in LAYERS if any(k[1] == layer for k in self.cells)] or list(LAYERS[:6])
        table = Table(title=self.title, title_justify="left")
        table.add_column("node")
        for layer in layers:
            table.add_column(layer)
        for node in self.rows:
            table.add_row(
                node, *(_MARK[s] if (s := self.cells.get((node, layer))) else "[dim]…[/]" for layer in layers)
            )
        return table


def limit_set(cfg: SiteConfig, value: str | None) -> set[str] | None:
    if not value:
        return None
    names = {n.strip() for n in value.split(",") if n.strip()}
    unknown = names - {n.name for n in cfg.nodes}
    if unknown:
        raise UsageError(
            f"--limit: no such node in the site: {', '.join(sorted(unknown))}",
            hint="use the node names of appliance.yml",
        )
    return names


def limit_from_pattern(cfg: SiteConfig, pattern: str | None) -> set[str] | None:
    """The nodes an ansible --limit pattern names literally (comma or colon separated); None
    (every node) when it names none of them, e.g. a group or a wildcard."""
    if not pattern:
        return None
    names = {p.strip() for p in pattern.replace(":", ",").split(",")} & {n.name for n in cfg.nodes}
    return names or None


def run_with_view(cfg: SiteConfig, limit: set[str] | None, before_install: bool = False) -> Report:
    grid = Grid(cfg, [n.name for n in cfg.nodes if limit is None or n.name in limit])
    if not ui.interactive():
        return run_preflight(cfg, on_result=grid.add, limit=limit, before_install=before_install)
    with Live(grid.render(), console=ui.out, refresh_per_second=8, transient=False) as live:

        def on_result(r: CheckResult) -> None:
            grid.add(r)
            live.update(grid.render())

        return run_preflight(cfg, on_result=on_result, limit=limit, before_install=before_install)


def grouped(results: list[CheckResult]) -> list[tuple[str, CheckResult]]:
    """Failures and warnings, one per distinct finding: the same check saying the same thing on
    several nodes is one entry naming them ('4 nodes (master1, …)'), in first-seen order."""
    groups: dict[tuple[object, ...], list[CheckResult]] = {}
    for r in results:
        if r.status in (Status.FAIL, Status.WARN):
            groups.setdefault((r.status, r.layer, r.check, r.value, r.expected, r.hint), []).append(r)
    out = []
    for rows in groups.values():
        nodes = sorted(r.node for r in rows)
        who = nodes[0] if len(nodes) == 1 else f"{len(nodes)} nodes ({', '.join(nodes)})"
        out.append((who, rows[0]))
    return out


def show(report: Report) -> None:
    for who, r in grouped(report.results):
        line = f"{who}: {r.layer}/{r.check}: {r.value}" + (f" (expected {r.expected})" if r.expected else "")
        if r.status is Status.FAIL:
            ui.error(line, r.hint or None)
        else:
            ui.warn(f"{line} — {r.hint}" if r.hint else line)
    skipped = [r for r in report.results if r.status is Status.SKIP]
    reasons = sorted({r.hint for r in skipped})
    c = report.counts()
    ui.info(
        f"preflight {report.site}: {c['pass']} passed, {c['warn']} warnings, {c['fail']} failed, "
        f"{c['skip']} skipped in {report.seconds:.1f}s"
        + (f" (skipped: {'; '.join(reasons)})" if reasons else "")
    )


def write_reports(report: Report, args: argparse.Namespace) -> None:
    for option, writer in (
        ("json", reports.write_json),
        ("junit", reports.write_junit),
        ("text", reports.write_text),
        ("html", reports.write_html),
    ):
        if getattr(args, option, None):
            writer(report, Path(getattr(args, option)))
            ui.info(f"wrote {getattr(args, option)}")


def check_site(
    cfg: SiteConfig,
    limit: set[str] | None,
    args: argparse.Namespace | None = None,
    before_install: bool = False,
) -> Report:
    """Run, show and write the reports; a failed check is a PrerequisiteError (exit 3)."""
    report = run_with_view(cfg, limit, before_install)
    show(report)
    if args is not None:
        write_reports(report, args)
    if report.failed:
        first = report.failed[0]
        more = f" (+{len(report.failed) - 1} more)" if len(report.failed) > 1 else ""
        raise PrerequisiteError(
            f"preflight: {first.node}: {first.layer}/{first.check}: {first.value}{more}",
            hint=first.hint or "fix the failures listed above",
        )
    return report


def cmd_preflight(args: argparse.Namespace) -> int:
    cfg = load_site(resolve_site_arg(args))
    knownhosts.require_host_keys(cfg)
    check_site(cfg, limit_set(cfg, args.limit), args)
    return 0
