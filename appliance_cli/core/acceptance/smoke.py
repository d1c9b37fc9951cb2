"""The smoke jobs: one whole GPU and one half GPU, each running `nvidia-smi` to completion; and
the check of what they printed. The CPU-only smoke job (`--scenario cpu-smoke`) asks for no GPU:
it shows that the scheduler stack places a job and a node runs it to completion, printing the
CPUs it sees, on a site whose GPUs are not ready yet (or a lab). Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass

from appliance_cli.core.acceptance.compare import fmt
from appliance_cli.core.acceptance.model import Image, SmokeJob

SMOKE_JOBS = (SmokeJob("smoke-gpu", 1), SmokeJob("smoke-fraction", 0.5))
CPU_SMOKE_JOB = SmokeJob("smoke-cpu", 0, Image.CPU)
CPU_SMOKE = 'echo "cpu smoke: $(nproc) CPUs"'  # what the CPU-only smoke container runs
# What the smoke container runs: the full table for the log, then one parseable line per GPU.
NVIDIA_SMI = "nvidia-smi && nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits"
# A fraction's memory against the whole GPU's: TR-4858 line 308 saw exactly half (16,255 MB of a
# 32 GB V100) for 0.5; 2 % of slack covers rounding to MiB and what the sharing layer keeps back.
FRACTION_MEMORY_SLACK = 0.02
_GPU_LINE = re.compile(r"^\s*([^,\n]+?)\s*,\s*(\d+)\s*$", re.M)
_CPU_LINE = re.compile(r"^cpu smoke: (\d+) CPUs$", re.M)  # CPU_SMOKE's line


@dataclass(frozen=True)
class SmokeOutcome:
    job: SmokeJob
    phase: str  # the pod's last phase: Succeeded, Failed, Pending (timed out)…
    log: str
    node: str = ""


@dataclass(frozen=True)
class SmokeVerdict:
    job: SmokeJob
    passed: bool
    message: str
    gpu: str = ""
    memory_mib: int | None = None


def gpus_seen(log: str) -> list[tuple[str, int]]:
    """(model, MiB) for each GPU line of `nvidia-smi --query-gpu=name,memory.total`."""
    return [(m[1], int(m[2])) for m in _GPU_LINE.finditer(log)]


def check_smoke(outcomes: list[SmokeOutcome]) -> list[SmokeVerdict]:
    """Each job completed and saw exactly one GPU; a fraction saw its share of the memory of the
    same model as the whole-GPU job saw (not compared when they ran on different models)."""
    verdicts: list[SmokeVerdict] = []
    whole: dict[str, int] = {}
    for o in sorted(outcomes, key=lambda o: o.job.gpus < 1):
        cpu = o.job.image is Image.CPU
        name = f"smoke {o.job.name} ({'CPU only' if cpu else fmt(o.job.gpus) + ' GPU'})"
        seen = gpus_seen(o.log)
        tail = (o.log.strip().splitlines() or ["no output"])[-1]  # the log's last word, for a failure
        if o.phase != "Succeeded":
            verdicts.append(SmokeVerdict(o.job, False, f"{name}: the pod ended {o.phase}: {tail}"))
            continue
        if cpu:  # its line in the log: the container ran the command, not only ended well
            m = _CPU_LINE.search(o.log)
            where = f"completed on {o.node or '?'}"
            if m is None:
                verdicts.append(
                    SmokeVerdict(o.job, False, f"{name}: {where}, but its log lacks its line: {tail}")
                )
            else:
                verdicts.append(SmokeVerdict(o.job, True, f"{name}: {where}, where it saw {m[1]} CPUs"))
            continue
        if len(seen) != 1:
            verdicts.append(
                SmokeVerdict(o.job, False, f"{name}: nvidia-smi showed {len(seen)} GPUs, expected 1")
            )
            continue
        model, mib = seen[0]
        if o.job.gpus >= 1:
            whole[model] = mib
            verdicts.append(SmokeVerdict(o.job, True, f"{name}: {model}, {mib} MiB", model, mib))
            continue
        full = whole.get(model)
        if full is None:
            msg = f"{name}: {model}, {mib} MiB (no whole-GPU run on that model to compare with)"
            verdicts.append(SmokeVerdict(o.job, True, msg, model, mib))
            continue
        share = mib / full
        ok = abs(share - o.job.gpus) <= FRACTION_MEMORY_SLACK
        msg = f"{name}: {model}, {mib} of {full} MiB ({share:.0%}, expected {o.job.gpus:.0%})"
        verdicts.append(SmokeVerdict(o.job, ok, msg, model, mib))
    return verdicts
