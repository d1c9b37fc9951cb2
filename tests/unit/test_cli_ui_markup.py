"""Error, hint and warning lines carry the tools' own words, brackets and all: kubeadm's
"[ERROR CRI]", the API server's "Error: [a and b should be specified together]". rich must print
them as they are, never take them for markup and drop them."""

from __future__ import annotations

import pytest

from appliance_cli.cli import ui

BRACKETED = 'err="Error: [oidc-issuer-url and oidc-client-id should be specified together]" [bold]x[/]'


@pytest.mark.parametrize(
    ("show", "prefix"),
    [
        (lambda m: ui.error(m), "error: "),
        (lambda m: ui.warn(m), "warning: "),
        (lambda m: ui.show_hint(m), "hint: "),
        (lambda m: ui.error("boom", hint=m), "hint: "),
    ],
)
def test_bracketed_words_are_printed_as_they_are(show, prefix, capsys):
    show(BRACKETED)
    lines = capsys.readouterr().err.splitlines()
    assert f"{prefix}{BRACKETED}" in lines


def _bundle_with_profile(tmp_path, profile: str):
    import json

    head = {"schema": "appliance-bundle", "schema_version": 1, "profile": profile, "created": "c"}
    # ensure_ascii: a lone surrogate is written as the escape \ud800
    (tmp_path / "manifest.json").write_text(
        json.dumps({**head, "tool_version": "1", "chunk_size": 1, "artifacts": []})
    )
    return tmp_path


def test_a_lone_surrogate_read_from_a_file_is_printed_escaped(tmp_path, capsys):
    """Found by tests/unit/test_fuzz_inputs.py: JSON's "\\ud800" (YAML's "\\uD800") is a str no
    UTF-8 stream can write: `bundle inspect` of a manifest whose profile held one was exit 70 (a
    UnicodeEncodeError on stdout, its message on two lines). Printed escaped, as Python's stderr
    does."""
    from appliance_cli.cli.main import main

    assert main(["bundle", "inspect", str(_bundle_with_profile(tmp_path, "lab\ud800"))]) == 0
    out, err = capsys.readouterr()
    assert "profile lab\\ud800," in out and err == ""


HOSTILE = "x\x1b[2J\x07\ry\x9b2J\x7f"  # clear screen, bell, carriage return, C1 CSI, DEL
SHOWN = "x\\x1b[2J\\x07\\x0dy\\x9b2J\\x7f"


def test_a_control_character_in_a_manifest_field_is_printed_escaped(tmp_path, capsys, monkeypatch):
    """An ESC sequence in a manifest's profile or an artifact's version cleared the operator's
    screen (rich passes ESC through; it drops BEL and CR without a trace): printed as \\x1b."""
    import json

    from appliance_cli.cli.main import main

    art = {"name": "tool", "kind": "file", "version": HOSTILE, "size": 0, "digest": "sha256:" + "0" * 64,
           "files": []}  # fmt: skip
    head = {"schema": "appliance-bundle", "schema_version": 1, "profile": HOSTILE, "created": "c"}
    (tmp_path / "manifest.json").write_text(
        json.dumps({**head, "tool_version": "1", "chunk_size": 1, "artifacts": [art]})
    )
    monkeypatch.setattr(ui.out, "_width", 300)  # the --all table whole, no cell cut short
    assert main(["bundle", "inspect", "--all", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert f"profile {SHOWN}, created c" in out
    assert SHOWN in out.split("version", 1)[1]  # the --all table's version cell
    assert not any(c in out for c in "\x1b\x07\r\x9b\x7f") and err == ""


def test_a_control_character_in_an_error_line_is_printed_escaped(tmp_path, capsys):
    from appliance_cli.cli.main import main

    bundle = tmp_path / HOSTILE
    bundle.mkdir()
    assert main(["bundle", "inspect", str(bundle)]) == 4
    err = capsys.readouterr().err
    assert f"error: {tmp_path}/{SHOWN}/manifest.json: no manifest.json" in err
    assert not any(c in err for c in "\x1b\x07\r\x9b\x7f")


def test_ordinary_text_is_printed_as_it_is() -> None:
    text = "node worker1: ünïcode — ok\n\tsecond line [x]"
    assert ui.visible(text) == text
    assert ui.visible("a\nb\tc", lines=False) == "a\\x0ab\\x09c"
