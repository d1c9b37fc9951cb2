"""Where the suite's time went in the last `make test` (or `make test-reverse`): each module's lab
setup and tests, slowest first, and the run's wall time, read from the JSON pytest wrote
(tests/_support/timings.py). Given two such files (a baseline run and a new one), each module's
total in both side by side with their ratio, and the two runs' totals and wall times. Prints
figures; asserts nothing.

    .venv/bin/python bench/suite_times.py [build/suite-times-e2e.json]
    .venv/bin/python bench/suite_times.py BASELINE.json NEW.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

DEFAULT = Path(__file__).resolve().parents[1] / "build" / "suite-times-e2e.json"


def _load(path: Path) -> dict | None:
    if not path.is_file():
        print(f"error: {path}: no timings yet", file=sys.stderr)
        print("hint: run `./make.sh test` first (it writes them)", file=sys.stderr)
        return None
    return json.loads(path.read_text())


def _ratio(new: float, base: float) -> str:
    return f"{new / base:6.2f}x" if base else "     -"


def compare(base: dict, new: dict) -> None:
    """Each module's total in both runs, the new run's slowest first, with new/base."""
    totals = [{r["module"]: r["setup"] + r["tests"] for r in d["modules"]} for d in (base, new)]
    print(f"{'module':<58} {'base s':>8} {'new s':>8} {'new/base':>8}")
    for module in sorted(totals[0].keys() | totals[1].keys(), key=lambda m: -totals[1].get(m, 0.0)):
        b, n = totals[0].get(module, 0.0), totals[1].get(module, 0.0)
        print(f"{module:<58} {b:8.1f} {n:8.1f} {_ratio(n, b):>8}")
    b, n = sum(totals[0].values()), sum(totals[1].values())
    print(f"{'all modules (work)':<58} {b:8.1f} {n:8.1f} {_ratio(n, b):>8}")
    b, n = base["wall_s"], new["wall_s"]
    print(f"{'pytest wall time':<58} {b:8.1f} {n:8.1f} {_ratio(n, b):>8}")


def main(argv: list[str]) -> int:
    if len(argv) == 2:
        base, new = _load(Path(argv[0])), _load(Path(argv[1]))
        if base is None or new is None:
            return 2
        compare(base, new)
        return 0
    data = _load(Path(argv[0]) if argv else DEFAULT)
    if data is None:
        return 2
    rows = data["modules"]
    layers: dict[str, list[float]] = {}
    print(f"{'module':<58} {'setup s':>8} {'tests s':>8} {'total s':>8}")
    for r in rows:
        print(f"{r['module']:<58} {r['setup']:8.1f} {r['tests']:8.1f} {r['setup'] + r['tests']:8.1f}")
        layer = r["module"].split("/")[1] if r["module"].count("/") >= 2 else "other"
        acc = layers.setdefault(layer, [0.0, 0.0])
        acc[0] += r["setup"]
        acc[1] += r["tests"]
    for layer, (setup, tests) in sorted(layers.items()):
        print(f"{'all of tests/' + layer:<58} {setup:8.1f} {tests:8.1f} {setup + tests:8.1f}")
    print(f"pytest wall time: {data['wall_s']:.0f} s ({data['wall_s'] / 60:.1f} min)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
