"""`python3 -m k8s_standin TOOL ...` (from tests/standin) or the packed zipapp: one tool per basename(argv[0])."""

from __future__ import annotations

import sys

from .entry import main

if __name__ == "__main__":
    sys.exit(main(sys.argv))
