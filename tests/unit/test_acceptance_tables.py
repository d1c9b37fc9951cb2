"""TR-4858's tables (sections 4.8-4.10) as the acceptance comparison reads them: for every table
of the seed, the state it prints passes and the same state with one GPU more or less for any
project fails, naming that project and the step. The transcription is held against the seed's
own lines where the seed is at hand (shared/seeds, next to the repository)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from appliance_cli.core.acceptance.compare import compare
from appliance_cli.core.acceptance.model import Allocation, Delete, Job, Scenario, Step
from appliance_cli.core.acceptance.tr4858 import SCENARIOS, SITE_GPUS, SITE_QUOTAS, STATE_TABLES
from tests._support.paths import ROOT

STEPS = [(sc, st) for sc in SCENARIOS for st in sc.steps]
BY_NAME = {sc.name: sc for sc in SCENARIOS}


def _id(item: tuple[Scenario, Step]) -> str:
    return f"{item[0].name}:{item[1].name}"


def _deviations(alloc: Allocation) -> list[tuple[str, Allocation]]:
    out = []
    for p in alloc:
        for delta in (1, -1):
            if alloc[p] + delta >= 0:
                out.append((p, {**alloc, p: alloc[p] + delta}))
    return out


# The seed's rows, transcribed a second time and independently of tr4858.py:
# (section, job, project, GPUs asked, "Total" column = allocated/quota after it, seed line).
ROWS = [
    ("4.8", "a-1-1-jupyter", "team-a", 1, "1/4", 459),
    ("4.8", "a-1-g", "team-a", 1, "2/4", 460),
    ("4.8", "a-2-gg", "team-a", 2, "4/4", 461),
    ("4.8", "b-1-g06", "team-b", 0.6, "0.6/2", 462),
    ("4.8", "b-2-g04", "team-b", 0.4, "1/2", 463),
    ("4.8", "b-3-g", "team-b", 1, "2/2", 464),
    ("4.8", "b-4-gg", "team-b", 2, "4/2", 465),
    ("4.8", "c-1-g05", "team-c", 0.5, "0.5/2", 466),
    ("4.8", "c-2-g03", "team-c", 0.3, "0.8/2", 467),
    ("4.8", "c-3-g02", "team-c", 0.2, "1/2", 468),
    ("4.8", "c-4-gg", "team-c", 2, "3/2", 469),
    ("4.8", "c-5-g", "team-c", 1, "4/2", 470),
    ("4.8", "d-1-gggg", "team-d", 4, "4/8", 471),
    ("4.9", "d-2-gg", "team-d", 2, "6/8", 526),
    ("4.9", "d-3-gg", "team-d", 2, "8/8", 529),
    ("4.10", "a-3-gg", "team-a", 2, "4/4", 557),
    ("4.10", "a-4-gg", "team-a", 2, "4/4", 558),
    ("4.10", "b-5-gg", "team-b", 2, "2/2", 559),
    ("4.10", "c-6-gg", "team-c", 2, "2/2", 560),
]


@pytest.mark.parametrize("item", STEPS, ids=_id)
def test_every_step_passes_its_own_table_and_fails_one_gpu_off(item: tuple[Scenario, Step]) -> None:
    sc, step = item
    for alloc in step.expected:
        assert compare(sc.name, step, alloc).passed, alloc
        for project, off in _deviations(alloc):
            if any(off == other for other in step.expected):
                continue  # 4.9's either-or: b 4 / c 2 is the other accepted state
            v = compare(sc.name, step, off)
            assert not v.passed
            assert project in v.message and step.name in v.message and sc.name in v.message
            assert f"{project} has " in v.message


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r[0]}:{r[1]}")
def test_each_submission_row_of_the_seed(row: tuple[str, str, str, float, str, int]) -> None:
    section, name, project, gpus, total, line = row
    step = next(s for s in BY_NAME[section].steps if s.name == name)
    assert isinstance(step.action, Job)
    assert (step.action.project, step.action.gpus) == (project, gpus)
    allocated, quota = (float(x) for x in total.split("/"))
    assert SITE_QUOTAS[project] == quota
    assert all(abs(alt[project] - allocated) < 1e-9 for alt in step.expected)
    assert str(line) in step.seed_lines


def test_the_sequence_is_the_seeds() -> None:
    jobs = [(sc.name, st.name) for sc in SCENARIOS for st in sc.steps if isinstance(st.action, Job)]
    assert jobs == [(r[0], r[1]) for r in ROWS]
    # 4.8: 13 workloads, 7 training and 6 interactive (line 347)
    s48 = [st.action for st in BY_NAME["4.8"].steps if isinstance(st.action, Job)]
    assert (len(s48), sum(j.interactive for j in s48)) == (13, 6)
    last = BY_NAME["4.10"].steps[-1]
    assert last.action == Delete("team-d", ("d-1-gggg", "d-2-gg", "d-3-gg"))  # line 582
    assert SITE_GPUS == sum(SITE_QUOTAS.values()) == 16


@pytest.mark.parametrize(
    "table,scenario,index",
    [("4.8", "4.8", -1), ("4.9", "4.9", -1), ("4.10 submitted", "4.10", -2), ("4.10 stable", "4.10", -1)],
)
def test_each_state_table(table: str, scenario: str, index: int) -> None:
    """The "At this point" tables and 4.10's stable state are the states after their step."""
    lines, state = STATE_TABLES[table]
    step = BY_NAME[scenario].steps[index]
    assert step.expected == (state,) and lines in step.seed_lines
    assert compare(scenario, step, state).passed
    v = compare(scenario, step, {**state, "team-b": state["team-b"] + 1})
    assert not v.passed and "team-b has" in v.message and step.name in v.message


def test_the_final_state_is_a_8_b_4_c_4_d_0() -> None:
    step = BY_NAME["4.10"].steps[-1]
    v = compare("4.10", step, {"team-a": 8, "team-b": 4, "team-c": 4, "team-d": 0})
    assert v.passed
    v = compare("4.10", step, {"team-a": 7, "team-b": 4, "team-c": 4, "team-d": 0})
    assert v.message == ("4.10 step delete team-d (seed lines 582; 403-406): team-a has 7 GPUs, expected 8")


def test_fractions_add_up_without_slack() -> None:
    step = next(s for s in BY_NAME["4.8"].steps if s.name == "c-3-g02")
    assert compare("4.8", step, {"team-a": 4, "team-b": 4, "team-c": 0.5 + 0.3 + 0.2, "team-d": 0}).passed
    v = compare("4.8", step, {"team-a": 4, "team-b": 4, "team-c": 0.8, "team-d": 0})
    assert not v.passed and "team-c has 0.8 GPUs, expected 1" in v.message


def test_4_9_accepts_either_team_first_and_nothing_else() -> None:
    step = BY_NAME["4.9"].steps[0]
    assert compare("4.9", step, {"team-a": 4, "team-b": 2, "team-c": 4, "team-d": 6}).passed
    assert compare("4.9", step, {"team-a": 4, "team-b": 4, "team-c": 2, "team-d": 6}).passed
    v = compare("4.9", step, {"team-a": 4, "team-b": 3, "team-c": 3, "team-d": 6})
    assert not v.passed and "accepted:" in v.message
    # nobody preempted: team-d still waits
    v = compare("4.9", step, {"team-a": 4, "team-b": 4, "team-c": 4, "team-d": 4})
    assert not v.passed and "team-d has 4 GPUs, expected 6" in v.message


def test_a_project_outside_the_table_holding_gpus_fails() -> None:
    step = BY_NAME["4.8"].steps[0]
    v = compare("4.8", step, {"team-a": 1, "team-b": 0, "team-c": 0, "team-d": 0, "team-x": 1})
    assert not v.passed and "team-x has 1 GPUs, expected 0" in v.message


# ---- against the seed file itself, when it is next to the repository ----
SEED = next(iter(sorted((ROOT.parent / "shared" / "seeds").glob("004_*.txt"))), None)


def _seed_lines() -> list[str]:
    if SEED is None:
        pytest.skip("the TR-4858 seed (shared/seeds/004_*.txt) is not next to the repository")
    return Path(SEED).read_text().splitlines()


def _total(line: str) -> tuple[str, float, float]:
    cells = [c.strip() for c in line.split("\t")]
    frac = next(c for c in cells[1:] if re.match(r"^[0-9.]+/[0-9]+\b", c))
    a, q = re.match(r"^([0-9.]+)/([0-9]+)", frac).groups()  # type: ignore[union-attr]
    return cells[0], float(a), float(q)


def test_rows_match_the_seed_file() -> None:
    lines = _seed_lines()
    for section, name, project, _gpus, total, line in ROWS:
        got = _total(lines[line - 1])
        assert got == (project, *(float(x) for x in total.split("/"))), (section, name, line)


def test_state_tables_match_the_seed_file() -> None:
    lines = _seed_lines()
    for table, (span, state) in STATE_TABLES.items():
        first, last = (int(x) for x in span.split("-"))
        rows = [_total(lines[i - 1]) for i in range(first, last + 1)]
        assert {p: a for p, a, _ in rows} == state, table
        assert {p: q for p, _, q in rows} == SITE_QUOTAS, table
    quotas = {c[0]: float(c[1]) for c in (ln.split("\t") for ln in lines[320:324])}
    assert quotas == SITE_QUOTAS  # lines 321-324
