"""Reading framework YAMLs (the frameworks' counterpart of costmodel.machine.loading, the only module
of costmodel.frameworks that touches files).

``load_framework("pytorch")`` loads a framework shipped in ``costmodel/frameworks/``;
``load_framework("path/to/mine.yaml")`` a user's file. Parsed strictly by the pure
:func:`costmodel.frameworks.framework.framework_from_dict`; a mistake is one line naming the file,
its line and the key.
"""

from __future__ import annotations

import os
from functools import lru_cache
from importlib import resources
from pathlib import Path

from costmodel.frameworks.framework import Framework, framework_from_dict
from costmodel.machine.loading import line_of
from networks.errors import DnnplanError, did_you_mean, short
from networks.reading import read_text
from networks.spec_yaml import load_yaml

#: The framework priced when none is named: the cost model's fused kernels issued by a host that
#: never holds the device back (what dnnplan priced before frameworks were files).
DEFAULT_FRAMEWORK = "ideal"

_SUFFIXES = (".yaml", ".yml")


def shipped_framework_names() -> list[str]:
    """Names of the frameworks shipped in ``costmodel/frameworks/``, sorted."""
    return sorted(entry.name.rsplit(".", 1)[0] for entry in resources.files("costmodel.frameworks").iterdir()
                  if entry.name.endswith(_SUFFIXES))


def is_framework_path(name: str) -> bool:
    return name.endswith(_SUFFIXES) or "/" in name or os.sep in name


def framework_from_yaml(text: str, source: str) -> Framework:
    """Parse framework YAML ``text`` (``source`` names it in errors)."""
    data = load_yaml(text, source)
    try:
        return framework_from_dict(data, source)
    except DnnplanError as err:
        raise err.located(file=source, line=line_of(text, err.field)) from None


@lru_cache(maxsize=64)
def load_framework(name_or_path: str) -> Framework:
    """A shipped framework by name (``pytorch``) or a framework YAML by path (one line for an
    unknown name or a file with a mistake)."""
    if is_framework_path(name_or_path):
        text = read_text(Path(name_or_path), "framework", missing_hint="give a path to a framework YAML or one of "
                                                                    f"{', '.join(shipped_framework_names())}")
        return framework_from_yaml(text, name_or_path)
    names = shipped_framework_names()
    if name_or_path not in names:
        close = did_you_mean(name_or_path, names)
        raise DnnplanError(f"unknown --framework {short(name_or_path)}",
                           hint=(f"did you mean '{close}'? " if close else "") +
                           f"shipped frameworks: {', '.join(names)}; or give a path to a framework YAML")
    resource = resources.files("costmodel.frameworks").joinpath(name_or_path + ".yaml")
    return framework_from_yaml(resource.read_text(), f"costmodel/frameworks/{resource.name}")
