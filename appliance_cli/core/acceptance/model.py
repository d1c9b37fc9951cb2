"""The acceptance scenarios as data: jobs submitted, jobs deleted, and the GPUs per project the
seed says the scheduler must settle on after each step. No I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

Allocation = dict[str, float]  # project -> GPUs allocated (fractions summed)


class Image(StrEnum):
    """What a job runs. The seed (TR-4858 4.8, lines 326-329) used jupyter/base-notebook and
    gcr.io/run-ai-demo/quickstart (its table also names a NetApp image); the appliance's bundle
    carries neither, so every job runs the bundle's CUDA base image (see manifests.py)."""

    NVIDIA_SMI = "nvidia-smi"  # runs `nvidia-smi` once and exits (the smoke jobs)
    SLEEP = "sleep"  # lists its GPU, then holds it until deleted (the TR-4858 jobs)
    CPU = "cpu"  # prints the CPUs it sees and exits: no GPU (the CPU-only smoke job)


@dataclass(frozen=True)
class Job:
    project: str
    name: str  # the seed's job name (the Kubernetes object gets a prefix, see manifests.py)
    gpus: float  # whole (1, 2, 4) or a fraction of one GPU (0.6)
    interactive: bool = False  # the seed's `--interactive`; otherwise a training job
    image: Image = Image.SLEEP
    seed_image: str = ""  # the image the seed submitted, for the record

    @property
    def fractional(self) -> bool:
        return self.gpus < 1


@dataclass(frozen=True)
class Delete:
    project: str
    names: tuple[str, ...]


@dataclass(frozen=True)
class Step:
    """One action and the state the scheduler must reach after it. `expected` lists the acceptable
    allocations: one, except where the seed leaves a choice to the scheduler (4.9: "Team-b/c")."""

    name: str  # the job submitted, or "delete team-d"
    action: Job | Delete
    expected: tuple[Allocation, ...]
    seed_lines: str  # where the seed states this step and its expected state
    note: str = ""  # the seed's comment (queued workloads), shown, not compared

    @property
    def projects(self) -> list[str]:
        return sorted({p for alloc in self.expected for p in alloc})


@dataclass(frozen=True)
class Scenario:
    name: str  # what --scenario takes
    title: str
    steps: tuple[Step, ...]
    after: str | None = None  # a scenario whose end state this one starts from (run first)
    description: str = ""


@dataclass(frozen=True)
class SmokeJob:
    """A job that must complete and print its GPU: `gpus` whole or a fraction; for a fraction the
    memory it sees must be that fraction of a whole GPU's (TR-4858 line 308: 0.5 of a 32 GB V100
    showed 16,255 MB). With 0 GPUs (Image.CPU) it must only complete: the scheduler stack placed it
    and a node ran it."""

    name: str
    gpus: float
    image: Image = Image.NVIDIA_SMI


@dataclass(frozen=True)
class Plan:
    """What a run submits: the smoke jobs (in `smoke_project`), then the TR-4858 scenarios that
    apply to the site; `refused` says why a part does not run on this site."""

    smoke_project: str | None
    smoke: tuple[SmokeJob, ...]
    scenarios: tuple[Scenario, ...]
    refused: dict[str, str] = field(default_factory=dict)  # part -> why it does not run
