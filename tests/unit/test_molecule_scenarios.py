"""`make molecule` runs every role's scenario: the Makefile's list and roles/*/molecule/lab agree,
and CI's subset is taken from that list."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _make_list(var: str) -> list[str]:
    m = re.search(rf"^{var} \??:?= (.+)$", (REPO / "Makefile").read_text(), re.M)
    assert m, f"Makefile sets no {var}"
    return m.group(1).split()


def test_make_molecule_lists_exactly_the_roles_with_a_scenario():
    have = sorted(p.parents[2].name for p in (REPO / "roles").glob("*/molecule/lab/molecule.yml"))
    listed = _make_list("MOLECULE_ROLES")
    assert len(listed) == len(set(listed)), listed
    assert sorted(listed) == have


def test_ci_runs_roles_that_have_a_scenario():
    assert set(_make_list("CI_MOLECULE_ROLES")) <= set(_make_list("MOLECULE_ROLES"))


def test_every_role_with_tasks_has_a_scenario():
    """appliance_paths alone has none: defaults only, no tasks to converge."""
    roles = sorted(p.name for p in (REPO / "roles").iterdir() if (p / "tasks").is_dir())
    have = {p.parents[2].name for p in (REPO / "roles").glob("*/molecule/lab/molecule.yml")}
    assert len(roles) == 19 and [r for r in roles if r not in have] == []
