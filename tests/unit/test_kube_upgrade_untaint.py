"""kube_upgrade's removal of the Run:ai drain taint: kubectl's answer for a taint already gone
(`taint "KEY:EFFECT" not found`, kubectl's cmd/taint) passes, any other failure, a node the API
does not know included (`nodes "N" not found`), fails. The task's own failed_when, evaluated by
ansible-core's templar."""

from __future__ import annotations

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from tests._support.paths import ROOT

TASKS = ROOT / "roles" / "kube_upgrade" / "tasks" / "worker.yml"


def _failed_when() -> str:
    [task] = [
        t
        for t in yaml.safe_load(TASKS.read_text())
        if t["name"] == "Kube upgrade | Remove the Run:ai drain taint"
    ]
    return str(task["failed_when"])


@pytest.mark.parametrize(
    "rc, stderr, failed",
    [
        (0, "", False),
        (1, 'error: taint "runai:NoExecute" not found\n', False),
        (1, 'Error from server (NotFound): nodes "worker9" not found\n', True),
        (
            1,
            "The connection to the server 10.77.0.11:6443 was refused - did you specify the right host or port?\n",
            True,
        ),
    ],
)
def test_only_a_taint_already_gone_is_tolerated(rc: int, stderr: str, failed: bool) -> None:
    result = {"rc": rc, "stderr": stderr}
    templar = Templar(loader=DataLoader(), variables={"kube_upgrade_untaint": result})
    assert templar.evaluate_conditional(trust_as_template(_failed_when())) is failed
