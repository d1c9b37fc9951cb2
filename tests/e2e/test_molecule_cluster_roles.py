"""Molecule's lab scenario of every role that acts on an installed cluster (backup, restore,
upgrades: tests/_support/molecule_scenarios.py, the cluster lane), one after another in a lab of
their own: the first installs it and saves it, the others boot from that snapshot; kube_upgrade
installs the old bundle's lab and hands it, upgraded and up, to chart_upgrade, which runs next
(lab.py save-next). `make molecule` runs the same scenarios by hand."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests._support import molecule_scenarios
from tests._support.labsnap import REPO

pytestmark = pytest.mark.e2e
LOGS = REPO / "build" / "molecule"
LAB = "mol-cluster"  # not the build lane's: the two lanes run at once
_, CLUSTER = molecule_scenarios.lanes()


@pytest.fixture(scope="module")
def lab(own_lab_cm) -> Iterator[str]:
    """The lane's lab, held (locked, owned by this run, purged before and after) for its scenarios;
    each scenario's own create and destroy bring it up and down. A scenario a killed run left
    running on it is stopped first."""
    molecule_scenarios.stop_orphan(LOGS, LAB)
    with own_lab_cm(LAB):
        yield LAB


@pytest.mark.parametrize("role", CLUSTER)
def test_the_roles_molecule_scenario_passes(lab: str, role: str) -> None:
    i = CLUSTER.index(role)
    run = molecule_scenarios.run(role, lab, LOGS, hand_to=CLUSTER[i + 1] if i + 1 < len(CLUSTER) else None)
    assert run.rc == 0, (
        f"`molecule test -s lab` in roles/{role} failed (rc {run.rc}) after {run.seconds:.0f} s; "
        f"its log: {run.log}\n{run.tail()}"
    )
