"""helm's merge of user values over a chart's values, as the roles and the bundle checks read it."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any


def coalesce(base: Any, over: Any) -> Any:
    """helm's merge of user values over chart values: maps key by key, anything else replaced;
    a key set to None in `over` is removed."""
    if not isinstance(base, Mapping) or not isinstance(over, Mapping):
        return copy.deepcopy(over)
    out = dict(copy.deepcopy(base))
    for k, v in over.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = coalesce(out.get(k), v) if isinstance(out.get(k), Mapping) else copy.deepcopy(v)
    return out
