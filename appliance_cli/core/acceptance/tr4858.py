"""NetApp TR-4858 (shared/seeds/004_*.txt) sections 4.8-4.10, transcribed: every job its
"Testing Details" submit, in order, and the GPUs per project after each.

The seed's tables give, per submitted job, the submitting project's total ("Total", e.g. `3/2`:
3 GPUs allocated against a quota of 2); the other projects keep what they had, so each step
below spells out the whole state. The "At this point" tables (lines 510-513, 541-544, 574-577)
and the final one (403-406) are the states after the last step of each section; the unit tests
check the steps against each of them. Numbers are GPUs allocated; quotas are SITE_QUOTAS.

Where the seed and its own command lines differ, the command lines win (they are what ran):
* the 4.8 table names a "NetApp" image for a-1-g, b-3-g, b-4-gg, c-4-gg, c-5-g and d-1-gggg, and
  "Run:AI" for the fractions; every command (lines 487-503) submits gcr.io/run-ai-demo/quickstart;
* the 4.8 state table's header says "(soft quota/actual allocation)" (line 510) but its rows are
  allocation/quota like every other table (team-b `4/2` is 4 allocated, quota 2: line 465);
* the 4.9 state table says no workload is queued (lines 541-544), while lines 366 and 386 say
  one job each of team-b and team-c is pending: queued workloads are shown, never compared.
"""

from __future__ import annotations

from appliance_cli.core.acceptance.model import Allocation, Delete, Job, Scenario, Step

# Lines 318-324: "set the following projects and quotas"; 16 GPUs (two DGX-1, line 292, 353).
SITE_QUOTAS: dict[str, float] = {"team-a": 4, "team-b": 2, "team-c": 2, "team-d": 8}
SITE_GPUS = 16
JUPYTER = "jupyter/base-notebook"  # line 328
QUICKSTART = "gcr.io/run-ai-demo/quickstart"  # line 329


def _state(a: float, b: float, c: float, d: float) -> Allocation:
    return {"team-a": a, "team-b": b, "team-c": c, "team-d": d}


def _job(project: str, name: str, gpus: float, interactive: bool = False, image: str = QUICKSTART) -> Job:
    return Job(project=project, name=name, gpus=gpus, interactive=interactive, seed_image=image)


def _submit(job: Job, state: Allocation, lines: str, note: str = "") -> Step:
    return Step(name=job.name, action=job, expected=(state,), seed_lines=lines, note=note)


# Testing Details for Section 4.8 (lines 452-513): 13 jobs, 7 training and 6 interactive
# (line 347); the table (458-471) and the commands actually run (483-503).
S48 = Scenario(
    name="4.8",
    title="TR-4858 4.8 high cluster utilization with over-quota GPU allocation",
    description="13 jobs (6 interactive, 4 of them fractions) fill the 16 GPUs; team-b and team-c "
    "borrow team-d's idle quota",
    steps=(
        _submit(_job("team-a", "a-1-1-jupyter", 1, True, JUPYTER), _state(1, 0, 0, 0), "459, 483-486"),
        _submit(_job("team-a", "a-1-g", 1), _state(2, 0, 0, 0), "460, 487"),
        _submit(_job("team-a", "a-2-gg", 2), _state(4, 0, 0, 0), "461, 488", "using all their quota"),
        _submit(_job("team-b", "b-1-g06", 0.6, True), _state(4, 0.6, 0, 0), "462, 489-490", "fractional GPU"),
        _submit(_job("team-b", "b-2-g04", 0.4, True), _state(4, 1, 0, 0), "463, 491-492", "fractional GPU"),
        _submit(_job("team-b", "b-3-g", 1), _state(4, 2, 0, 0), "464, 493"),
        _submit(_job("team-b", "b-4-gg", 2), _state(4, 4, 0, 0), "465, 494", "two over quota"),
        _submit(_job("team-c", "c-1-g05", 0.5, True), _state(4, 4, 0.5, 0), "466, 495-496", "fractional GPU"),
        _submit(_job("team-c", "c-2-g03", 0.3, True), _state(4, 4, 0.8, 0), "467, 497-498", "fractional GPU"),
        _submit(_job("team-c", "c-3-g02", 0.2, True), _state(4, 4, 1, 0), "468, 499-500", "fractional GPU"),
        _submit(_job("team-c", "c-4-gg", 2), _state(4, 4, 3, 0), "469, 501", "one over quota"),
        _submit(_job("team-c", "c-5-g", 1), _state(4, 4, 4, 0), "470, 502", "two over quota"),
        # after it, "At this point" (510-513): a 4/4, b 4/2, c 4/2, d 4/8, nothing queued; 16/16 (353)
        _submit(_job("team-d", "d-1-gggg", 4), _state(4, 4, 4, 4), "471, 503; 510-513", "using half of their quota"),
    ),
)  # fmt: skip

# Testing Details for Section 4.9 (lines 519-544): team-d, under its quota, takes its GPUs back.
_D2 = _job("team-d", "d-2-gg", 2)
S49 = Scenario(
    name="4.9",
    title="TR-4858 4.9 basic resource allocation fairness (preemption)",
    description="team-d asks for 4 more GPUs within its quota: one 2-GPU job each of team-b and "
    "team-c is preempted (lines 362, 366)",
    after="4.8",
    steps=(
        # Line 526: "Team-b/c workload pauses": the seed does not say which of the two goes first
        # (line 373: one team's, then the other's), so either is accepted here, and only here.
        Step(
            name=_D2.name,
            action=_D2,
            expected=(_state(4, 2, 4, 6), _state(4, 4, 2, 6)),
            seed_lines="526, 534",
            note="a team-b or team-c workload is preempted and pending",
        ),
        # "At this point" (541-544): a 4/4, b 2/2, c 2/2, d 8/8
        _submit(_job("team-d", "d-3-gg", 2), _state(4, 2, 2, 8), "529, 535; 541-544",
                "the other team's (b/c) workload is preempted and pending"),
    ),
)  # fmt: skip

# Testing Details for Section 4.10 (lines 550-585) and the stable state of section 4.10 (400-406).
S410 = Scenario(
    name="4.10",
    title="TR-4858 4.10 over-quota fairness",
    description="with every team over its quota, team-d's GPUs go back in the ratio of the "
    "quotas: team-a twice as many as team-b and team-c (lines 390, 397)",
    after="4.9",
    steps=(
        _submit(_job("team-a", "a-3-gg", 2), _state(4, 2, 2, 8), "557, 565", "1 workload queued"),
        _submit(_job("team-a", "a-4-gg", 2), _state(4, 2, 2, 8), "558, 566", "2 workloads queued"),
        _submit(_job("team-b", "b-5-gg", 2), _state(4, 2, 2, 8), "559, 567", "2 workloads queued"),
        # "At this point" (574-577): a 4/4, b 2/2, c 2/2, d 8/8
        _submit(_job("team-c", "c-6-gg", 2), _state(4, 2, 2, 8), "560, 568; 574-577", "2 workloads queued"),
        # Line 582: `runai delete -p team-d d-1-gggg d-2-gg d-3-gg`; the system "should stabilize
        # on" (400-406): a 8/4 (empty queue), b 4/2, c 4/2 (one queued each), d 0/8.
        Step(
            name="delete team-d",
            action=Delete("team-d", ("d-1-gggg", "d-2-gg", "d-3-gg")),
            expected=(_state(8, 4, 4, 0),),
            seed_lines="582; 403-406",
            note="team-b and team-c: one workload queued each",
        ),
    ),
)  # fmt: skip

SCENARIOS = (S48, S49, S410)

# The seed's tables as printed, for the tests to hold the steps against: (lines, allocation).
STATE_TABLES: dict[str, tuple[str, Allocation]] = {
    "4.8": ("510-513", _state(4, 4, 4, 4)),
    "4.9": ("541-544", _state(4, 2, 2, 8)),
    "4.10 submitted": ("574-577", _state(4, 2, 2, 8)),
    "4.10 stable": ("403-406", _state(8, 4, 4, 0)),
}
