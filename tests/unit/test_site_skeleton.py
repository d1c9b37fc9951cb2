"""The skeleton `appliance init` writes and the reference example are one document: they may
differ only in the comment header above the first `---` (what to do next vs. which appliance it is)."""

from __future__ import annotations

from pathlib import Path

import yaml

from appliance_cli.core.siteconfig import load_site

ROOT = Path(__file__).resolve().parents[2]
SKELETON = ROOT / "templates" / "site" / "appliance.yml"
EXAMPLE = ROOT / "inventories" / "example" / "appliance.yml"


def _split(path: Path) -> tuple[list[str], list[str]]:
    lines = path.read_text().splitlines()
    start = lines.index("---")
    return lines[:start], lines[start:]


def test_skeleton_equals_the_example_below_its_header() -> None:
    skel_head, skel_body = _split(SKELETON)
    ex_head, ex_body = _split(EXAMPLE)
    assert all(line.startswith("#") for line in skel_head + ex_head), "headers are comments only"
    assert skel_body == ex_body, (
        "templates/site/appliance.yml and inventories/example/appliance.yml drifted apart below '---': "
        "edit both the same way"
    )


def test_skeleton_is_a_valid_site_config(tmp_path: Path) -> None:
    (tmp_path / "appliance.yml").write_text(SKELETON.read_text())
    cfg = load_site(tmp_path)
    assert cfg.nodes and yaml.safe_load(SKELETON.read_text())["site"]["name"] == cfg.site.name
