"""roles/helm/files/pull-images.sh, run by sh against a fake crictl that logs its calls: one
`crictl images -o json` answers for every image it lists exactly; the others are asked about one
by one, and pulled."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "roles" / "helm" / "files" / "pull-images.sh"
LISTED = "master1:5000/nvidia/gpu-operator:v24.6.2"


def _fake_crictl(tmp: Path, listing: str | None, known: set[str]) -> Path:
    """A crictl that logs argv; `images -o json` prints LISTING (or fails when None); inspecti
    succeeds for KNOWN refs; pull succeeds unless the ref contains 'absent'."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    (tmp / "listing.json").write_text(listing or "")
    exe = bin_dir / "crictl"
    known_case = "|".join(f'"{k}"' for k in known) or '"-none-"'
    exe.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> "{tmp}/calls"\n'
        'case "$1" in\n'
        f"  images) {'cat ' + str(tmp / 'listing.json') if listing is not None else 'exit 1'} ;;\n"
        f'  inspecti) case "$2" in {known_case}) exit 0 ;; *) exit 1 ;; esac ;;\n'
        '  pull) case "$2" in *absent*) echo "not found" >&2; exit 1 ;; *) exit 0 ;; esac ;;\n'
        "esac\n"
    )
    exe.chmod(0o755)
    return bin_dir


def _run(tmp: Path, bin_dir: Path, *refs: str) -> tuple[list[str], list[str]]:
    r = subprocess.run(
        ["sh", str(SCRIPT), *refs],
        capture_output=True,
        text=True,
        env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
        timeout=30,
        check=True,
    )
    calls = (tmp / "calls").read_text().splitlines() if (tmp / "calls").exists() else []
    return r.stdout.splitlines(), calls


def _listing(*tags: str) -> str:
    return json.dumps({"images": [{"id": "sha256:1", "repoTags": list(tags), "repoDigests": []}]}, indent=2)


def test_listed_images_cost_one_call_and_the_others_are_asked_then_pulled(tmp_path: Path) -> None:
    other, absent = "master1:5000/nvidia/cuda:12.6.1-base-ubi8", "master1:5000/absent/x:1"
    bin_dir = _fake_crictl(tmp_path, _listing(LISTED), known=set())
    out, calls = _run(tmp_path, bin_dir, LISTED, other, absent)
    assert out[:2] == [f"present {LISTED}", f"pulled {other}"]
    assert out[2].startswith(f"missing {absent} not found")
    assert calls == [
        "images -o json",
        f"inspecti {other}",
        f"pull {other}",
        f"inspecti {absent}",
        f"pull {absent}",
    ]


def test_only_an_exact_reference_counts_as_listed(tmp_path: Path) -> None:
    """A prefix of a listed tag, or a pattern, is not present by the listing."""
    prefix, pattern = LISTED.rsplit(":", 1)[0], "master1:5000/nvidia/*"
    bin_dir = _fake_crictl(tmp_path, _listing(LISTED), known=set())
    out, _ = _run(tmp_path, bin_dir, prefix, pattern)
    assert out == [f"pulled {prefix}", f"pulled {pattern}"]


def test_a_failed_listing_falls_back_to_one_question_per_image(tmp_path: Path) -> None:
    bin_dir = _fake_crictl(tmp_path, None, known={LISTED})
    out, calls = _run(tmp_path, bin_dir, LISTED)
    assert out == [f"present {LISTED}"]
    assert calls == ["images -o json", f"inspecti {LISTED}"]


def test_check_mode_pulls_nothing(tmp_path: Path) -> None:
    other = "master1:5000/nvidia/cuda:12.6.1-base-ubi8"
    bin_dir = _fake_crictl(tmp_path, _listing(LISTED), known=set())
    out, calls = _run(tmp_path, bin_dir, "--check", LISTED, other)
    assert out == [f"present {LISTED}", f"absent {other}"]
    assert not [c for c in calls if c.startswith("pull")]
