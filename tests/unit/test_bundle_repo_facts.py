"""bundle_repo's one assert on every node (tasks/facts.yml, `Facts | A signed apt repository of
the bundle for this node`), its condition and line rendered by Ansible's own templating: no apt
repository of the bundle for the node's distribution, and the bundle's repository unsigned, are
each named in one line; a site's own repository (bundle.apt_repo_url) and a dry run with nothing
served yet are left alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

TASKS = yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "roles" / "bundle_repo" / "tasks" / "facts.yml").read_text()
)
ASSERT = next(t for t in TASKS if t["name"] == "Facts | A signed apt repository of the bundle for this node")
URL = "http://10.77.0.11:8081/apt/debian-bookworm"
REPOS = [
    {"name": "debian-bookworm", "distro": "debian", "codename": "bookworm", "url": URL, "keyring": "KEY"}
]


def _problem(apt_url: str, keyring: str, repos: list[dict[str, Any]], **over: Any) -> str:
    """The assert's line for these facts, "" when its condition holds (rendered as Ansible does)."""
    variables: dict[str, Any] = {
        "bundle_repo_master": "master1",
        "hostvars": {"master1": {"bundle_repo_view": {"apt_repos": repos}}},
        "bundle_repo_apt_repo_url": "",
        "appliance_apt_repo_url": apt_url,
        "appliance_apt_keyring": keyring,
        "ansible_check_mode": False,
        "ansible_facts": {"distribution": "Ubuntu", "distribution_release": "focal"},
        **over,
    }
    task_vars = {k: trust_as_template(v) for k, v in ASSERT["vars"].items()}
    templar = Templar(loader=DataLoader(), variables=variables | task_vars)
    spec = ASSERT["ansible.builtin.assert"]
    holds = templar.evaluate_conditional(trust_as_template(spec["that"]))
    message = templar.template(trust_as_template(spec["fail_msg"]))  # the action templates it either way
    assert isinstance(holds, bool) and isinstance(message, str)
    return "" if holds else message


def test_a_signed_repository_for_the_node_passes() -> None:
    assert _problem(URL, "KEY", REPOS) == ""


def test_no_repository_for_the_nodes_distribution_is_named_with_what_the_bundle_has() -> None:
    assert _problem("", "", REPOS) == (
        "the bundle has no apt repository for Ubuntu focal (it has: debian-bookworm): build the bundle with an "
        "apt entry for this distribution, or set bundle.apt_repo_url in the site config"
    )


def test_an_unsigned_repository_of_the_bundle_is_named() -> None:
    unsigned = [REPOS[0] | {"keyring": ""}]
    assert _problem(URL, "", unsigned) == (
        f"the bundle's apt repository at {URL} carries no signing key in its manifest (a bundle built before apt "
        "repositories were signed): build the bundle again with this toolkit; apt no longer reads an unsigned "
        "repository"
    )


@pytest.mark.parametrize(
    "over",
    [
        {
            "bundle_repo_apt_repo_url": "http://mirror.site/ubuntu",
            "appliance_apt_repo_url": "http://mirror.site/ubuntu",
        },
        {"ansible_check_mode": True},  # a dry run before the master serves an index: nothing to match
    ],
)
def test_the_sites_own_repository_and_an_early_dry_run_are_left_alone(over: dict[str, Any]) -> None:
    repos = [] if over.get("ansible_check_mode") else REPOS
    assert _problem(over.get("appliance_apt_repo_url", ""), "", repos, **over) == ""
