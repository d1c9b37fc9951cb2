import gzip
import os
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


def _counting_scanner(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """dpkg-scanpackages replaced by one that lists the .debs it was run over, each run recorded."""
    from appliance_cli.debian import aptclosure

    runs: list[Path] = []

    def fake_run(argv, *, cwd, **_kw):
        assert argv[0] == "dpkg-scanpackages"
        runs.append(cwd)
        return "".join(f"Filename: ./{p.relative_to(cwd).as_posix()}\n\n" for p in sorted(cwd.rglob("*.deb")))

    monkeypatch.setattr(aptclosure, "run", fake_run)
    return runs


def test_an_unchanged_repository_keeps_its_index_and_every_change_indexes_it_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = _counting_scanner(monkeypatch)
    (tmp_path / "a_1_amd64.deb").write_bytes(b"a")
    index_flat_repo(tmp_path)
    first = (tmp_path / "Packages").read_bytes()
    index_flat_repo(tmp_path)
    assert len(runs) == 1 and (tmp_path / "Packages").read_bytes() == first  # kept: nothing changed

    (tmp_path / "b_1_amd64.deb").write_bytes(b"b")  # a package added
    index_flat_repo(tmp_path)
    assert len(runs) == 2 and b"b_1_amd64.deb" in (tmp_path / "Packages").read_bytes()

    deb = tmp_path / "a_1_amd64.deb"  # rewritten in place, its size and mtime put back
    st = deb.stat()
    deb.write_bytes(b"A")
    os.utime(deb, ns=(st.st_atime_ns, st.st_mtime_ns))
    index_flat_repo(tmp_path)
    assert len(runs) == 3

    (tmp_path / "Packages").write_text("edited by hand\n")  # the index itself changed
    index_flat_repo(tmp_path)
    assert len(runs) == 4 and b"a_1_amd64.deb" in (tmp_path / "Packages").read_bytes()

    (tmp_path / "Packages.gz").unlink()
    index_flat_repo(tmp_path)
    assert (
        len(runs) == 5
        and gzip.decompress((tmp_path / "Packages.gz").read_bytes()) == (tmp_path / "Packages").read_bytes()
    )

    (tmp_path / "b_1_amd64.deb").unlink()  # a package removed
    index_flat_repo(tmp_path)
    assert len(runs) == 6 and b"b_1_amd64.deb" not in (tmp_path / "Packages").read_bytes()
    index_flat_repo(tmp_path)
    assert len(runs) == 6
