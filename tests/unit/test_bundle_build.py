"""Build: incremental, resumable, refuses placeholders and missing sources, survives ENOSPC."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from appliance_cli.bundle import keygen, load_manifest, sign_bundle, verify_bundle
from appliance_cli.bundle import store as store_mod
from appliance_cli.bundle.build import build_bundle, pip_failure_cause
from appliance_cli.cli.main import main
from appliance_cli.errors import BundleError
from tests._support.bundles import build, make_profile


def test_incremental_rebuild_skips_existing_blobs(tmp_path: Path) -> None:
    prof = make_profile(tmp_path)
    first = build(tmp_path, prof)
    assert first.blobs_written > 0
    mtimes = {p.name: p.stat().st_mtime_ns for p in (first.path / "blobs/sha256").iterdir()}
    second = build(tmp_path, prof)
    assert second.blobs_written == 0 and second.blobs_skipped > 0
    assert mtimes == {p.name: p.stat().st_mtime_ns for p in (first.path / "blobs/sha256").iterdir()}


def test_rebuild_keeps_signature_only_when_unchanged(tmp_path: Path) -> None:
    prof = make_profile(tmp_path)
    res = build(tmp_path, prof)
    priv, _, _ = keygen(tmp_path / "k")
    sign_bundle(res.path, priv)
    assert build(tmp_path, prof).signature_kept
    (tmp_path / "src" / "tool-a").write_bytes(b"changed")
    again = build(tmp_path, prof)
    assert not again.signature_kept and not (res.path / "manifest.sig").exists()
    assert again.pruned == 1  # the old tool-a blob is gone
    verify_bundle(res.path)


def _tree_state(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under `root`, the root included, with its inode and mtime: a file replaced (even
    by the same bytes) gets a new inode, and an entry made and removed again changes its
    directory's mtime."""
    return {
        str(p.relative_to(root)): (p.lstat().st_ino, p.lstat().st_mtime_ns) for p in [root, *root.rglob("*")]
    }


def test_a_rebuild_and_resign_that_change_nothing_touch_nothing(tmp_path: Path) -> None:
    """Found in the suite: two molecule lanes share one lab bundle, one lane rebuilding it (nothing
    changed) while the other verified it; the verify saw the build's .staging at the bundle's root
    and refused the bundle ("unexpected directory .staging"). A stick may be read while someone
    re-runs the build: a build and a sign with nothing to change must leave it as it is."""
    prof = make_profile(tmp_path)
    res = build(tmp_path, prof)
    priv, pub, _ = keygen(tmp_path / "k")
    sign_bundle(res.path, priv)
    assert {"index.json", "oci-layout", "manifest.sig"} <= {p.name for p in res.path.iterdir()}
    before = _tree_state(res.path)
    again = build(tmp_path, prof)
    sign_bundle(res.path, priv)
    assert again.signature_kept and again.blobs_written == 0
    assert _tree_state(res.path) == before
    verify_bundle(res.path, pub)
    # a change is still written, and the staging it needed is gone afterwards
    (tmp_path / "src" / "tool-a").write_bytes(b"changed")
    changed = build(tmp_path, prof)
    assert changed.blobs_written == 1 and not (res.path / ".staging").exists()
    assert _tree_state(res.path) != before


def test_resume_after_interrupted_write(tmp_path: Path, monkeypatch) -> None:
    """Kill the build in the middle of a blob: no half blob under blobs/, no manifest, re-run recovers."""
    prof = make_profile(tmp_path, files={"tool-a": b"a" * 10, "tool-b": b"b" * 300_000})
    calls = {"n": 0}
    real = store_mod.BlobStore._commit

    def dying_commit(self, staged, digest, size):
        calls["n"] += 1
        if calls["n"] == 2:  # second blob: written to staging, then the process "dies"
            raise KeyboardInterrupt
        return real(self, staged, digest, size)

    monkeypatch.setattr(store_mod.BlobStore, "_commit", dying_commit)
    with pytest.raises(KeyboardInterrupt):
        build(tmp_path, prof)
    out = tmp_path / "bundle"
    assert not (out / "manifest.json").exists()
    assert len(list((out / "blobs/sha256").iterdir())) == 1  # only the finished first blob
    assert list((out / ".staging").glob("*.part"))  # the half one stayed in staging
    monkeypatch.setattr(store_mod.BlobStore, "_commit", real)
    res = build(tmp_path, prof)
    assert res.blobs_skipped >= 1 and not (out / ".staging").exists()
    verify_bundle(out)


@pytest.fixture
def small_fs(tmp_path: Path):
    """A real 256 KiB filesystem (tmpfs), so ENOSPC comes from the kernel, not from a patch."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (make test runs as root)")
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_enospc_one_line_error_nothing_half_written(tmp_path: Path, small_fs: Path) -> None:
    prof = make_profile(tmp_path, files={"tool-a": os.urandom(600_000)}, images=[])
    out = small_fs / "bundle"
    with pytest.raises(BundleError) as ei:
        build(tmp_path, prof, out=out)
    assert "no space left on device while writing" in ei.value.message and "\n" not in ei.value.message
    assert not list((out / "blobs/sha256").iterdir())
    assert not list((out / ".staging").iterdir())
    # room again: the same build completes and verifies
    subprocess.run(["mount", "-o", "remount,size=4m", str(small_fs)], check=True)
    build(tmp_path, prof, out=out)
    verify_bundle(out)


def _write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_malformed_inline_pin_is_refused_naming_the_entry(tmp_path: Path) -> None:
    files = [{"name": "kubeadm", "url": "http://127.0.0.1:9/kubeadm", "sha256": "TO-BE-PINNED"}]
    prof = _write(tmp_path / "p.yml", {"name": "p", "files": files})
    with pytest.raises(
        BundleError, match=r"profile p: files/kubeadm: sha256 'TO-BE-PINNED' is not 64 hex digits"
    ):
        build(tmp_path, prof)
    assert not (tmp_path / "bundle").exists()


def test_an_unpinned_url_is_refused_before_anything_is_fetched(tmp_path: Path) -> None:
    prof = _write(
        tmp_path / "p.yml", {"name": "p", "files": [{"name": "kubeadm", "url": "http://127.0.0.1:9/k"}]}
    )
    with pytest.raises(BundleError, match=r"profile p: files/kubeadm: not in the lock") as exc:
        build(tmp_path, prof)
    assert "appliance bundle lock --profile p" in (exc.value.hint or "")
    assert not (tmp_path / "bundle").exists()


def test_a_production_profile_refuses_inline_pins(tmp_path: Path) -> None:
    """One source of truth: a production profile's pins are reviewed as a lock diff."""
    files = [{"name": "kubeadm", "url": "http://127.0.0.1:9/k", "sha256": "a" * 64}]
    prof = _write(tmp_path / "p.yml", {"name": "p", "production": True, "files": files})
    with pytest.raises(
        BundleError,
        match=r"files/kubeadm: an inline sha256 in a production profile \(its pins live in the lock\)",
    ):
        build(tmp_path, prof)


def test_a_lock_entry_wins_over_an_inline_pin_and_a_stale_one_is_refused(tmp_path: Path) -> None:
    from appliance_cli.bundle.lockfile import FileLock, Lock, lock_path, write_lock
    from appliance_cli.bundle.pins import pin_profile
    from appliance_cli.bundle.profile import load_profile

    files = [{"name": "kubeadm", "version": "v1", "url": "http://127.0.0.1:9/k", "sha256": "a" * 64}]
    prof_path = _write(tmp_path / "p.yml", {"name": "p", "files": files})
    lock = Lock(
        profile="p",
        files={"kubeadm": FileLock(url="http://127.0.0.1:9/k", version="v1", sha256="b" * 64, method="tofu")},
    )
    write_lock(lock_path(prof_path), lock)
    assert pin_profile(load_profile(prof_path), lock).profile.files[0].sha256 == "b" * 64
    stale = lock.model_copy(
        update={"files": {"kubeadm": lock.files["kubeadm"].model_copy(update={"version": "v0"})}}
    )
    with pytest.raises(
        BundleError,
        match=r"files/kubeadm: the lock holds http://127.0.0.1:9/k \(v0\), the profile asks for http://127.0.0.1:9/k \(v1\)",
    ):
        pin_profile(load_profile(prof_path), stale)


def test_a_lock_for_another_profile_is_refused(tmp_path: Path) -> None:
    from appliance_cli.bundle.lockfile import Lock, lock_path, write_lock

    prof = _write(tmp_path / "p.yml", {"name": "p", "files": []})
    write_lock(lock_path(prof), Lock(profile="q"))
    with pytest.raises(BundleError, match=r"lock .*p.lock.yml is for profile 'q', not 'p'"):
        build(tmp_path, prof)


def test_production_profile_build_is_refused_naming_what_the_lock_lacks(tmp_path: Path, capsys) -> None:
    rc = main(["bundle", "build", "--profile", "appliance-k8s1.23", "--out", str(tmp_path / "b")])
    err = capsys.readouterr().err
    assert rc == 4 and "Traceback" not in err
    assert "charts/kube-prometheus-stack: not in the lock (and 20 more)" in err
    assert "appliance bundle lock --profile appliance-k8s1.23" in err


def test_missing_standin_source_is_named(tmp_path: Path) -> None:
    prof = make_profile(tmp_path)
    (tmp_path / "src" / "tool-b").unlink()
    with pytest.raises(BundleError, match=r"tool-b: source file .*src/tool-b does not exist"):
        build(tmp_path, prof)


def test_lab_profile_names_missing_standins(tmp_path: Path) -> None:
    from appliance_cli.bundle import BuildOptions

    with pytest.raises(BundleError, match=r"kubeadm: source file .*tests/standin/k8s_standin does not exist"):
        build_bundle(BuildOptions(profile="lab", out=tmp_path / "b", repo_root=tmp_path))


def test_refuses_foreign_out_dir(tmp_path: Path) -> None:
    out = tmp_path / "home"
    out.mkdir()
    (out / "thesis.tex").write_text("x")
    with pytest.raises(BundleError, match="not a bundle directory"):
        build(tmp_path, make_profile(tmp_path), out=out)


def test_bad_profile_messages(tmp_path: Path) -> None:
    p = tmp_path / "p.yml"
    p.write_text(
        yaml.safe_dump(
            {"name": "p", "files": [{"name": "x", "checksum_url": "http://h/x.sha256", "source": "x"}]}
        )
    )
    with pytest.raises(BundleError, match=r"files/x: Value error, checksum_url belongs to a url entry"):
        build(tmp_path, p)
    with pytest.raises(BundleError, match="not found"):
        build(tmp_path, tmp_path / "nope.yml")


def test_wheels_from_local_requirement(tmp_path: Path, monkeypatch) -> None:
    """The wheel path, without network: pip builds a wheel of a tiny local project."""
    proj = tmp_path / "tiny"
    proj.mkdir()
    (proj / "setup.py").write_text(
        "from setuptools import setup\nsetup(name='tiny', version='1.0', py_modules=['tiny'])\n"
    )
    (proj / "tiny.py").write_text("X = 1\n")
    prof = make_profile(
        tmp_path, files={}, images=[], extra={"wheels": [{"name": "tiny", "requirements": [str(proj)]}]}
    )
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_NO_BUILD_ISOLATION", "0")  # pip reads it inverted: use the venv's setuptools
    res = build(tmp_path, prof)
    m, _ = load_manifest(res.path)
    (w,) = m.artifacts
    assert w.kind == "wheel" and w.name == "tiny" and w.version == "1.0" and w.files[0].path.endswith(".whl")
    assert os.path.getsize(res.path / "blobs/sha256" / w.digest[7:]) == w.size


def test_a_wheel_that_fails_to_build_names_pips_real_cause(tmp_path: Path, monkeypatch) -> None:
    """pip's last line is 'See above for details': the error names the build's own cause instead,
    and does not blame the package index."""
    proj = tmp_path / "broken"
    proj.mkdir()
    (proj / "setup.py").write_text("raise SystemExit('error: broken needs libfoo-dev to build')\n")
    prof = make_profile(
        tmp_path, files={}, images=[], extra={"wheels": [{"name": "broken", "requirements": [str(proj)]}]}
    )
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_NO_BUILD_ISOLATION", "0")
    with pytest.raises(
        BundleError, match=r"wheel/broken: pip \w+ failed: error: broken needs libfoo-dev"
    ) as ei:
        build(tmp_path, prof)
    assert "reachable" not in (ei.value.hint or "")


def test_a_package_the_index_lacks_blames_the_index() -> None:
    stderr = (
        "ERROR: Could not find a version that satisfies the requirement nosuch (from versions: none)\n"
        "ERROR: No matching distribution found for nosuch\n"
    )
    cause, hint = pip_failure_cause(stderr)
    assert cause == "ERROR: No matching distribution found for nosuch" and "reachable" in hint


def test_the_toolkit_wheel_is_rebuilt_when_anything_it_carries_changes(tmp_path: Path) -> None:
    """Every tree pyproject.toml force-includes in the wheel is in its cache key (module_utils too:
    a stale wheel would ship roles whose modules miss their shared code)."""
    import tomllib

    from appliance_cli.bundle.build import _wheel_key

    carried = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    tops = [*carried["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"], "appliance_cli"]
    for top in tops:
        (tmp_path / top).parent.mkdir(parents=True, exist_ok=True)
        if "." in top:
            (tmp_path / top).write_text("a")
        else:
            (tmp_path / top).mkdir(exist_ok=True)
            (tmp_path / top / "f").write_text("a")
    for top in tops:
        before = _wheel_key(tmp_path, [])
        target = tmp_path / top if "." in top else tmp_path / top / "f"
        target.write_text(target.read_text() + "b")
        assert _wheel_key(tmp_path, []) != before, top


def test_a_second_build_on_the_same_cache_waits_for_the_first_and_says_so(tmp_path: Path) -> None:
    import fcntl
    import threading

    from appliance_cli.bundle.build import CACHE_LOCK

    profile = make_profile(tmp_path)
    cache = tmp_path / "cache"
    cache.mkdir()
    notes: list[str] = []
    done = threading.Event()
    with (cache / CACHE_LOCK).open("a") as held:  # another build (of another bundle) holds the cache
        fcntl.flock(held, fcntl.LOCK_EX)
        waiter = threading.Thread(
            target=lambda: (
                build(tmp_path, profile, out=tmp_path / "other", progress=lambda e: notes.append(e.message)),
                done.set(),
            )
        )
        waiter.start()
        for _ in range(100):
            if any("another build is using this cache" in n for n in notes):
                break
            threading.Event().wait(0.05)
        assert not done.is_set() and "another build is using this cache: waiting for it" in notes
        fcntl.flock(held, fcntl.LOCK_UN)
    waiter.join(timeout=60)
    assert done.is_set() and load_manifest(tmp_path / "other")[0].artifacts
