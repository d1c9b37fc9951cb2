"""What tests/unit/test_fuzz_inputs.py found in the bundle's readers, held here one case each:
a manifest, a signature, a lock or a profile that is malformed in a way nobody wrote by hand is
still one line naming the file (exit 4), never an unexpected error (exit 70), and a vendor chart
whose Chart.yaml is odd is still imported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from appliance_cli.bundle import keygen
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
    ],
    ids=["deep-array", "deep-object", "newline-key", "digits"],
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
