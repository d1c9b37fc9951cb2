"""Paths the tests share."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "inventories" / "example" / "appliance.yml"  # the reference appliance's site config
