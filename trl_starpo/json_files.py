"""Reading JSON files that may have been damaged or written by someone else (a checkpoint, a store, an agent)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


def read_json_mapping(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``; a one-line ``ValueError`` when it is not JSON or not an object."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path} is damaged: not JSON ({error}).") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} is damaged: it holds a {type(data).__name__}, not a mapping.")
    return data


def json_text(data: Any, **kwargs: Any) -> str:
    """``json.dumps(data)`` that stays valid JSON: a NaN or infinite float (a statistic nothing measured, such as the
    validity of actions when none was sent) is written as ``null``."""

    def plain(value):
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict):
            return {key: plain(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [plain(item) for item in value]
        return value

    return json.dumps(plain(data), allow_nan=False, **kwargs)
