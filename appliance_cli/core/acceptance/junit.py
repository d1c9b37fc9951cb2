"""The acceptance run as JUnit XML: a testsuite per part (smoke, 4.8, 4.9, 4.10), a testcase per
smoke job or step; a part that does not apply to the site is one skipped testcase saying why."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from appliance_cli.core.acceptance.compare import fmt
from appliance_cli.core.acceptance.model import Plan
from appliance_cli.core.acceptance.plan import TR4858
from appliance_cli.core.acceptance.runner import Outcome


def _suite(parent: ET.Element, name: str) -> ET.Element:
    return ET.SubElement(parent, "testsuite", name=name)


def _count(suite: ET.Element) -> None:
    cases = suite.findall("testcase")
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(sum(c.find("failure") is not None for c in cases)))
    suite.set("skipped", str(sum(c.find("skipped") is not None for c in cases)))


def to_xml(plan: Plan, outcome: Outcome) -> ET.Element:
    root = ET.Element("testsuites", name="appliance acceptance", time=f"{outcome.seconds:.3f}")
    if plan.smoke:
        suite = _suite(root, "smoke")
        if "smoke" in outcome.skipped:
            ET.SubElement(ET.SubElement(suite, "testcase", classname="acceptance.smoke", name="smoke"),
                          "skipped", message=outcome.skipped["smoke"])  # fmt: skip
        for v in outcome.smoke:
            case = ET.SubElement(suite, "testcase", classname="acceptance.smoke", name=v.job.name)
            if not v.passed:
                ET.SubElement(case, "failure", message=v.message).text = v.message
            else:
                ET.SubElement(case, "system-out").text = v.message
        _count(suite)
    for sc in plan.scenarios:
        suite = _suite(root, f"TR-4858 {sc.name}")
        cls = f"acceptance.tr4858.{sc.name.replace('.', '_')}"
        if TR4858 in outcome.skipped:
            ET.SubElement(ET.SubElement(suite, "testcase", classname=cls, name=sc.name),
                          "skipped", message=outcome.skipped[TR4858])  # fmt: skip
        for r in (r for r in outcome.steps if r.scenario == sc.name):
            case = ET.SubElement(suite, "testcase", classname=cls, name=r.step.name, time=f"{r.seconds:.3f}")
            if r.verdict is None:
                ET.SubElement(case, "skipped", message="not run: an earlier step failed")
                continue
            observed = r.observed.allocated if r.observed else {}
            detail = "observed: " + ", ".join(f"{p} {fmt(g)}" for p, g in sorted(observed.items()))
            if not r.verdict.passed:
                ET.SubElement(case, "failure", message=r.verdict.message).text = detail
            else:
                ET.SubElement(case, "system-out").text = detail
        _count(suite)
    if outcome.cleanup_error:
        suite = _suite(root, "cleanup")
        case = ET.SubElement(suite, "testcase", classname="acceptance.cleanup", name="delete the run's jobs")
        ET.SubElement(case, "failure", message=outcome.cleanup_error)
        _count(suite)
    return root


def write_junit(plan: Plan, outcome: Outcome, path: Path) -> None:
    ET.ElementTree(to_xml(plan, outcome)).write(path, encoding="unicode", xml_declaration=True)
