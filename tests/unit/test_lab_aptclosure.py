import gzip
import shutil
from pathlib import Path

import pytest

from appliance_cli.debian.aptclosure import _sources_path, closure_key, index_flat_repo


def test_closure_key_ignores_package_order() -> None:
    assert closure_key("d", "s", ["b", "a"]) == closure_key("d", "s", ["a", "b", "a"])
    assert closure_key("d", "s", ["a"]) != closure_key("d2", "s", ["a"])
    assert closure_key("d", "s", ["a"]) != closure_key("d", "s2", ["a"])


def test_sources_format_detected(tmp_path: Path) -> None:
    assert _sources_path(tmp_path, "Types: deb\nURIs: x\n").name == "closure.sources"
    assert _sources_path(tmp_path, "deb http://x bookworm main\n").name == "closure.list"


@pytest.mark.skipif(shutil.which("dpkg-scanpackages") is None, reason="needs dpkg-dev")
def test_index_empty_flat_repo(tmp_path: Path) -> None:
    index_flat_repo(tmp_path)
    assert (tmp_path / "Packages").read_text() == ""
    assert gzip.decompress((tmp_path / "Packages.gz").read_bytes()) == b""
