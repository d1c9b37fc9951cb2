"""Pure rules of the registry role's registry_htpasswd module (the researcher registry's site
accounts): reading and writing htpasswd text, and what changes for which users."""

from __future__ import annotations

from tests._support.modules import load_role_module

ht = load_role_module("registry", "registry_htpasswd")


def test_parse_skips_blanks_and_comments_and_render_sorts():
    text = "# managed\n\nbob:$2y$05$b\nalice:$2y$05$a\nbroken line\n"
    entries = ht.parse_htpasswd(text)
    assert entries == {"bob": "$2y$05$b", "alice": "$2y$05$a"}
    assert ht.render_htpasswd(entries) == "alice:$2y$05$a\nbob:$2y$05$b\n"
    assert ht.parse_htpasswd(ht.render_htpasswd(entries)) == entries


def test_plan_adds_updates_and_removes():
    current = {"alice": "h1", "bob": "h2", "carol": "h3"}
    plan = ht.plan(current, ["alice", "bob", "dave"], verified={"alice"})
    assert plan == {"added": ["dave"], "updated": ["bob"], "removed": ["carol"]}
    assert ht.plan(current, ["alice", "bob", "carol"], verified=set(current)) == {
        "added": [],
        "updated": [],
        "removed": [],
    }
