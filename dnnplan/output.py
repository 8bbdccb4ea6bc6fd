"""Files the command line writes for scripts (JSON results, traces)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from networks.errors import DnnplanError


def write_json_file(path: str, data: dict) -> None:
    """Atomic: a failed run never leaves a partial file."""
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=str(target.parent), prefix=".dnnplan-")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=1)
        os.replace(tmp, target)
    except OSError as err:
        raise DnnplanError(f"cannot write {path}: {err.strerror or err}") from None
