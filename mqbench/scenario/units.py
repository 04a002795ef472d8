"""Parsing of human-friendly sizes (``1KiB``) and durations (``30s``)."""

from __future__ import annotations

import math
import re

_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
}
_DURATION_UNITS = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "m": 60.0, "min": 60.0, "h": 3600.0}
_NUMBER_UNIT = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(value: int | float | str) -> int:
    """Return a size in bytes from ``64``, ``"64B"``, ``"1KiB"``, ``"16 KB"``, ``"1MiB"``."""
    if isinstance(value, bool):
        raise ValueError(f"expected a size such as 64B or 1KiB, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"a size must be a whole number of bytes, got {value!r}")
        return int(value)
    if not isinstance(value, str):
        raise ValueError(f"expected a size such as 64B, 1KiB or 1MiB, got {value!r}")
    match = _NUMBER_UNIT.match(value)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _SIZE_UNITS:
        raise ValueError(f"expected a size such as 64B, 1KiB or 1MiB, got {value!r}")
    size = float(match.group(1)) * _SIZE_UNITS[unit]
    if not size.is_integer():
        raise ValueError(f"a size must be a whole number of bytes, got {value!r}")
    return int(size)


def parse_duration(value: int | float | str) -> float:
    """Return seconds from ``30``, ``"30s"``, ``"500ms"``, ``"2m"``, ``"1h"``."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration such as 30s or 2m, got {value!r}")
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise ValueError(f"a duration must be a finite number of seconds, got {value!r}")
        return float(value)
    if not isinstance(value, str):
        raise ValueError(f"expected a duration such as 30s, 500ms or 2m, got {value!r}")
    match = _NUMBER_UNIT.match(value)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _DURATION_UNITS:
        raise ValueError(f"expected a duration such as 30s, 500ms or 2m, got {value!r}")
    return float(match.group(1)) * _DURATION_UNITS[unit]


def format_size(size: int) -> str:
    """Short label for a byte count: ``64B``, ``1KiB``, ``16KiB``, ``1MiB``, ``1500B``."""
    for unit, factor in (("MiB", 1024**2), ("KiB", 1024)):
        if size >= factor and size % factor == 0:
            return f"{size // factor}{unit}"
    return f"{size}B"


def format_number(value: float) -> str:
    """Short label for a rate or count: ``10``, ``2.5``."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
