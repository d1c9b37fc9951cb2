"""Write a small configuration file only when its content differs, with a diff for --diff.

Shared by the roles' modules (os_prereqs, registry); stdlib only, Python >= 3.8 on the node."""

from __future__ import annotations

import os
import tempfile
from typing import Any


def read_text(path: str) -> str | None:
    """The file's text, or None when it does not exist."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        return None


def converge_file(
    path: str, content: str, mode: int = 0o644, check_mode: bool = False
) -> dict[str, Any] | None:
    """Make `path` hold exactly `content` (root-owned, `mode`); returns the diff when it changed.

    The new text is written next to the file and renamed over it: a reader never sees half a file."""
    before = read_text(path)
    if before == content and before is not None and (os.stat(path).st_mode & 0o7777) == mode:
        return None
    if not check_mode:
        directory = os.path.dirname(path) or "."
        os.makedirs(directory, mode=0o755, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".appliance-", dir=directory)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(content)
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    return {"before": before or "", "after": content, "before_header": path, "after_header": path}
