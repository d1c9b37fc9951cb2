"""Site configs for the acceptance tests: the example site, and the example made TR-4858's."""

from __future__ import annotations

from typing import Any

import yaml

from appliance_cli.core.siteconfig import SiteConfig, parse_site
from tests._support.paths import EXAMPLE


def example(**changes: Any) -> SiteConfig:
    data = yaml.safe_load(EXAMPLE.read_text())
    for key, value in changes.items():
        data["scheduler"][key] = value
    return parse_site(data)


def tr4858_site(stack: str = "runai") -> SiteConfig:
    """The example site made TR-4858's: a third 4-GPU worker (16 GPUs) and team-d's quota 8."""
    data = yaml.safe_load(EXAMPLE.read_text())
    data["nodes"].append({"name": "gpu3", "address": "192.168.10.23", "hardware_class": "S5N-3U",
                          "roles": ["gpu-worker"]})  # fmt: skip
    data["scheduler"]["projects"][3]["gpus"] = 8
    data["scheduler"]["stack"] = stack
    return parse_site(data)
