"""Reports written to files (JSON for machines and `report compare`, JUnit for CI dashboards,
plain text for vendor support). No printing: the CLI decides where they go."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape

from appliance_cli.content import templates_dir
from appliance_cli.core.checks.model import CheckResult, Report, Status

_COLORS = {Status.PASS: "#2da44e", Status.WARN: "#d4a72c", Status.FAIL: "#cf222e", Status.SKIP: "#aaaaaa"}
BAR_MAX = 420  # px


def write_json(report: Report, path: Path) -> None:
    path.write_text(json.dumps(report.to_dict(), indent=1) + "\n")


def write_junit(report: Report, path: Path) -> None:
    """One testsuite per layer, one testcase per check and node: failures are <failure>, skips
    <skipped> with their reason, warnings pass with the warning in system-out."""
    suites = ET.Element("testsuites", name=f"appliance {report.kind}", time=f"{report.seconds:.3f}")
    for layer in sorted({r.layer for r in report.results}):
        rows = [r for r in report.results if r.layer == layer]
        suite = ET.SubElement(
            suites,
            "testsuite",
            name=layer,
            tests=str(len(rows)),
            failures=str(sum(r.status is Status.FAIL for r in rows)),
            skipped=str(sum(r.status is Status.SKIP for r in rows)),
        )
        for r in rows:
            case = ET.SubElement(
                suite, "testcase", classname=f"{report.kind}.{layer}", name=f"{r.check}[{r.node}]"
            )
            detail = f"measured: {r.value}; expected: {r.expected}; hint: {r.hint}"
            if r.status is Status.FAIL:
                ET.SubElement(case, "failure", message=r.value or r.check).text = detail
            elif r.status is Status.SKIP:
                ET.SubElement(case, "skipped", message=r.hint)
            elif r.status is Status.WARN:
                ET.SubElement(case, "system-out").text = "warning: " + detail
    ET.ElementTree(suites).write(path, encoding="unicode", xml_declaration=True)


def write_text(report: Report, path: Path) -> None:
    """The support file: one line per result, failures first."""
    order = {Status.FAIL: 0, Status.WARN: 1, Status.SKIP: 2, Status.PASS: 3}
    lines = [f"appliance {report.kind} of site {report.site}: {report.counts()} in {report.seconds:.1f}s"]
    for r in sorted(report.results, key=lambda r: (order[r.status], r.layer, r.node, r.check)):
        lines.append(
            f"{r.status.upper():4} {r.layer:10} {r.node:12} {r.check:20} {r.value} | expected {r.expected} | {r.hint}"
        )
    path.write_text("\n".join(lines) + "\n")


def charts(report: Report) -> list[dict[str, object]]:
    """One horizontal bar chart per measured metric, one bar per node, coloured by status."""
    groups: dict[tuple[str, str], list[CheckResult]] = {}
    for r in report.results:
        if r.number is not None:
            groups.setdefault((r.layer, r.check), []).append(r)
    out = []
    for (layer, check), rows in groups.items():
        top = max(r.number or 0.0 for r in rows) or 1.0
        # room for the longest name (a pair of nodes: `worker1<>worker2`) and value, ~7 px a character
        label = max(110, 7 * max(len(r.node) for r in rows) + 12)
        tail = max(140, 7 * max(len(r.value) for r in rows) + 12)
        bars = [{"node": r.node, "value": r.value, "y": 6 + 24 * i, "w": max(2, round(BAR_MAX * (r.number or 0.0) / top)),
                 "color": _COLORS[r.status]} for i, r in enumerate(rows)]  # fmt: skip
        out.append({"layer": layer, "check": check, "unit": rows[0].unit, "better": rows[0].better or "higher",
                    "bars": bars, "label": label, "width": label + BAR_MAX + tail, "height": 12 + 24 * len(rows)})  # fmt: skip
    return out


def write_html(report: Report, path: Path, peer_warn: float = 0.8) -> None:
    env = Environment(
        loader=FileSystemLoader(str(templates_dir() / "report")), autoescape=select_autoescape(["html", "j2"])
    )
    html = env.get_template("diagnose.html.j2").render(
        report=report, counts=report.counts(), charts=charts(report), peer_warn=peer_warn,
        results=[r.to_dict() for r in report.results],
    )  # fmt: skip
    path.write_text(html)
