"""What tests/unit/test_fuzz_inputs.py found in the bundle's readers, held here one case each:
a manifest, a signature, a lock or a profile that is malformed in a way nobody wrote by hand is
still one line naming the file (exit 4), never an unexpected error (exit 70), and a vendor chart
whose Chart.yaml is odd is still imported."""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import tarfile
from pathlib import Path

import pytest

from appliance_cli.bundle import keygen, load_manifest, sign_bundle
from appliance_cli.bundle.model import Manifest
from appliance_cli.cli.main import main

HEAD = {
    "schema": "appliance-bundle",
    "schema_version": 1,
    "profile": "unit",
    "created": "c",
    "tool_version": "1",
}


def _bundle(tmp_path: Path, manifest: bytes | None = None) -> Path:
    root = tmp_path / "bundle"
    (root / "blobs" / "sha256").mkdir(parents=True)
    body = (
        manifest if manifest is not None else json.dumps({**HEAD, "chunk_size": 1, "artifacts": []}).encode()
    )
    (root / "manifest.json").write_bytes(body)
    return root


def _with_size(size: int) -> bytes:
    d = "sha256:" + "0" * 64
    art = {
        "name": "a",
        "kind": "file",
        "size": 1,
        "digest": d,
        "files": [{"path": "a", "digest": d, "size": size}],
    }
    return json.dumps({**HEAD, "chunk_size": 1, "artifacts": [art]}).encode()


def _one_error(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert "Traceback" not in err and all(line.startswith(("error: ", "hint: ", "BAD ")) for line in lines), (
        err
    )
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1, err
    return errors[0]


@pytest.mark.parametrize(
    "manifest, says",
    [
        # json's decoder recursed into a RecursionError (exit 70)
        (b"[" * 100_000, "manifest.json is not valid JSON: nested too deep"),
        (b'{"a": ' * 100_000, "manifest.json is not valid JSON: nested too deep"),
        # an unknown key holding a newline printed a line of its own: a forged `error:`
        (
            json.dumps({**HEAD, "chunk_size": 1, "artifacts": [], "x\nerror: forged": 1}).encode(),
            "manifest.json: 'x\\nerror: forged': Extra inputs are not permitted",
        ),
        # int()'s digit limit, without its advice to developers
        (
            b'{"schema": "appliance-bundle", "schema_version": 1, "chunk_size": ' + b"9" * 5000 + b"}",
            "value has 5000 digits",
        ),
        # a 4,001-digit size overflowed `bundle inspect`'s float arithmetic (OverflowError, exit 70)
        (
            _with_size(10**4000),
            "artifacts.0.files.0.size: Input should be less than or equal to 9223372036854775807",
        ),
    ],
    ids=["deep-array", "deep-object", "newline-key", "digits", "huge-size"],
)
@pytest.mark.parametrize("command", ["verify", "inspect"])
def test_a_malformed_manifest_is_one_line(tmp_path, capsys, manifest, says, command):
    assert main(["bundle", command, str(_bundle(tmp_path, manifest))]) == 4
    error = _one_error(capsys)
    assert says in error and "set_int_max_str_digits" not in error


def test_a_deeply_nested_signature_is_malformed_not_a_crash(tmp_path, capsys):
    root = _bundle(tmp_path)
    (root / "manifest.sig").write_bytes(b"[" * 100_000)
    _, pub, _ = keygen(tmp_path / "k")
    assert main(["bundle", "verify", str(root), "--key", str(pub)]) == 4
    assert "manifest.sig is malformed" in _one_error(capsys)


@pytest.mark.parametrize("key_id", ["a\nerror: forged", "\ntouch CANARY\n", 7])
def test_a_signature_whose_key_id_is_no_key_id_is_malformed(tmp_path, capsys, key_id):
    """Its key id was printed as it was ("made by key a\nerror: forged…"): a line of its own."""
    root = _bundle(tmp_path)
    sig = {
        "format": "appliance-bundle-signature/v1",
        "algorithm": "ed25519",
        "key_id": key_id,
        "signature": "",
    }
    (root / "manifest.sig").write_text(json.dumps(sig))
    _, pub, _ = keygen(tmp_path / "k")
    assert main(["bundle", "verify", str(root), "--key", str(pub)]) == 4
    assert "manifest.sig is malformed" in _one_error(capsys)


def _profile_and_lock(tmp_path: Path, lock: bytes) -> Path:
    (tmp_path / "fuzz.yml").write_text("name: fuzz\nproduction: true\n")
    (tmp_path / "fuzz.lock.yml").write_bytes(lock)
    return tmp_path / "fuzz.yml"


@pytest.mark.parametrize(
    "lock, says",
    [
        # read_text(): a UnicodeDecodeError (exit 70)
        (b"profile: fuzz\n# caf\xe9\n", "cannot read it: line 2, byte 6 (0xe9): not UTF-8"),
        # PyYAML's composer recursed into a RecursionError (exit 70)
        (
            b"profile: fuzz\nx: " + b"[" * 5000 + b"\n",
            "cannot read it: line 2: nested more than 64 levels deep",
        ),
        # SafeConstructor's own ValueError / AttributeError (exit 70)
        (b"profile: fuzz\nresolved: 2024-13-45\n", "line 2: '2024-13-45' is not a valid timestamp"),
        (b"profile: fuzz\nn: !!int x\n", "line 2: 'x' is not a valid int"),
        (b"profile: fuzz\nn: !!timestamp x\n", "line 2: 'x' is not a valid timestamp"),
        # a NUL: PyYAML's message ran onto a second line
        (
            b"profile: fuzz\n\x00\n",
            "cannot read it: line 2: character '\\x00': special characters are not allowed",
        ),
        # a key holding a newline printed a line of its own
        (
            b'profile: fuzz\nfiles: {"a\\nerror: forged": {}}\n',
            "files/'a\\nerror: forged'/url: Field required",
        ),
    ],
    ids=["non-utf8", "deep", "date", "int-tag", "timestamp-tag", "nul", "newline-key"],
)
def test_a_malformed_lock_is_one_line(tmp_path, capsys, lock, says):
    profile = _profile_and_lock(tmp_path, lock)
    assert main(["bundle", "lock", "--check", "--profile", str(profile), "--cache", str(tmp_path / "c")]) == 4
    error = _one_error(capsys)
    assert f"lock {tmp_path / 'fuzz.lock.yml'}: " in error and says in error


def test_a_profile_that_is_not_utf8_is_one_line(tmp_path, capsys):
    (tmp_path / "p.yml").write_bytes(b"name: caf\xe9\n")
    assert main(["bundle", "inspect", "--check-complete", "--profile", str(tmp_path / "p.yml")]) == 4
    assert "p.yml: invalid YAML: line 1, byte 10 (0xe9): not UTF-8" in _one_error(capsys)


def _vendor_tar(path: Path, chart_yaml: bytes, chart_file: str = "runai-backend-2.9.0.tgz") -> Path:
    chart = io.BytesIO()
    with tarfile.open(fileobj=chart, mode="w:gz") as t:
        ti = tarfile.TarInfo("c/Chart.yaml")
        ti.size = len(chart_yaml)
        t.addfile(ti, io.BytesIO(chart_yaml))
    with tarfile.open(path, "w") as t:
        ti = tarfile.TarInfo(f"deploy/{chart_file}")
        ti.size = len(chart.getvalue())
        t.addfile(ti, io.BytesIO(chart.getvalue()))
    return path


@pytest.mark.parametrize(
    "chart_yaml, file, name",
    [
        (b"just a string\n", "runai-backend-2.9.0.tgz", "runai-backend-2.9.0"),  # .get on a str: exit 70
        (b"- a list\n", "runai-backend-2.9.0.tgz", "runai-backend-2.9.0"),
        (b"built: 2024-13-45\n", "runai-backend-2.9.0.tgz", "runai-backend-2.9.0"),  # a ValueError: exit 70
        (b"name: -n\nversion: 1.0.0\n", "x.tgz", "n"),  # '-n' is no artifact name: exit 70
        (b"{}\n", "--help.tgz", "help"),
    ],
    ids=["string", "list", "bad-date", "dash-name", "dash-file"],
)
def test_an_odd_chart_yaml_is_imported_under_a_valid_name(tmp_path, capsys, chart_yaml, file, name):
    root = tmp_path / "bundle"
    (root / "blobs" / "sha256").mkdir(parents=True)
    (root / "manifest.json").write_bytes(Manifest(**HEAD, chunk_size=1 << 20, artifacts=[]).to_json())
    tar = _vendor_tar(tmp_path / "runai-2.9.0.tar", chart_yaml, file)
    assert main(["bundle", "import-runai", str(tar), "--into", str(root)]) == 0, capsys.readouterr().err
    manifest, _ = load_manifest(root)
    assert [a.label for a in manifest.artifacts] == [f"helm-chart/{name}"]


@pytest.fixture
def _alarm():
    """A read that blocks fails the test after 10 s instead of hanging the suite."""

    def ring(*_):
        raise TimeoutError("blocked reading the bundle")

    old = signal.signal(signal.SIGALRM, ring)
    signal.alarm(10)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def _oci_bundle(tmp_path: Path) -> Path:
    index = b'{"schemaVersion": 2, "manifests": []}'
    oci = {"digest": "sha256:" + hashlib.sha256(index).hexdigest(), "size": len(index)}
    root = _bundle(
        tmp_path, json.dumps({**HEAD, "chunk_size": 1, "oci_index": oci, "artifacts": []}).encode()
    )
    (root / "index.json").write_bytes(index)
    (root / "oci-layout").write_bytes(b'{"imageLayoutVersion":"1.0.0"}')
    return root


@pytest.mark.parametrize("name", ["manifest.json", "manifest.sig", "index.json", "oci-layout"])
@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_metadata_file_that_is_no_regular_file_is_refused_not_read(tmp_path, capsys, _alarm, name, kind):
    """Found by tests/unit/test_fuzz_inputs.py: a FIFO on the stick blocked `bundle verify` (and
    the install gate) for good; a symlink to /dev/zero read until memory ran out (exit 70). Here
    the device is /dev/null, which ends at once: a regression shows as a wrong message, not as a
    machine out of memory."""
    root = _oci_bundle(tmp_path)
    if name == "manifest.sig":
        sign_bundle(root, keygen(tmp_path / "k")[0])
    target = root / name
    target.unlink()
    if kind == "fifo":
        os.mkfifo(target)
    else:
        target.symlink_to("/dev/null")
    assert main(["bundle", "verify", str(root)]) == 4
    err = capsys.readouterr().err
    assert len([line for line in err.splitlines() if line.startswith("error: ")]) == 1, err
    said = (
        "cannot read: not a regular file" if name == "manifest.json" else "is unreadable: not a regular file"
    )
    assert f"{name}: {said}" in err if name == "manifest.json" else f"{name} {said}" in err, err
