"""Reading JSON files that may have been damaged or written by someone else (a checkpoint, a store, an agent)."""

from __future__ import annotations

import json
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
