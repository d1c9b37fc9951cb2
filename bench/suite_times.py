"""Where the suite's time went in the last `make test` (or `make test-reverse`): each module's lab
setup and tests, slowest first, and the run's wall time, read from the JSON pytest wrote
(tests/_support/timings.py). Prints figures; asserts nothing.

    .venv/bin/python bench/suite_times.py [build/suite-times.json]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

DEFAULT = Path(__file__).resolve().parents[1] / "build" / "suite-times-e2e.json"


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else DEFAULT
    if not path.is_file():
        print(f"error: {path}: no timings yet", file=sys.stderr)
        print("hint: run `./make.sh test` first (it writes them)", file=sys.stderr)
        return 2
    data = json.loads(path.read_text())
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
