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
