"""How the report rounds numbers: significant digits, and a mean to the precision of its interval.

A 95 % half-width is given to two significant digits and its mean to the same decimal place
(``0.068 ± 0.20``, ``1,950 ± 12``), the usual way to state a measurement with its
uncertainty; a mean without an interval keeps three significant digits in text and four in
CSV. A half-width that is floating-point noise next to its mean (the spread of identical
repeats computed as ``1.6e-17``) is zero.
"""

from __future__ import annotations

import math
from typing import Final

from mqbench.analysis.repeats import MeanCI

CI_DIGITS: Final = 2
TEXT_DIGITS: Final = 3
CSV_DIGITS: Final = 4
NOISE: Final = 1e-9
"""A half-width below this fraction of its mean (or of 1e-12 when the mean is 0) is noise."""


def magnitude(value: float) -> int:
    """The decimal exponent of ``value``'s leading digit (``0.0675`` -> -2, ``1950`` -> 3)."""
    return math.floor(math.log10(abs(value)))


def decimals(value: float, digits: int) -> int:
    """Decimal places that keep ``digits`` significant digits of ``value`` (may be < 0)."""
    if value == 0 or not math.isfinite(value):
        return 0
    return digits - 1 - magnitude(value)


def clean_ci(mean: float | None, ci: float | None) -> float | None:
    """``ci``, or 0 when it is floating-point noise next to ``mean``."""
    if ci is None:
        return None
    scale = abs(mean) if mean else 1e-3
    return 0.0 if abs(ci) < NOISE * scale else ci


def _places(mean: float, ci: float | None, digits: int) -> int:
    """Decimal places of a mean: those of its half-width's last significant digit, or
    ``digits`` significant digits of the mean when there is no (or a zero) half-width."""
    if ci:
        return decimals(ci, CI_DIGITS)
    return decimals(mean, digits)


def _fixed(value: float, places: int, grouped: bool) -> str:
    """``value`` rounded to ``places`` decimals (tens, hundreds when negative)."""
    if places < 0:
        value = round(value, places)
        places = 0
    text = f"{value:,.{places}f}" if grouped else f"{value:.{places}f}"
    return "0" if float(text.replace(",", "")) == 0 and places == 0 else text


def fmt_value(value: float | None, digits: int = TEXT_DIGITS) -> str:
    """A number with ``digits`` significant digits, thousands separated (``-`` for None).

    Numbers of ``digits`` or more integer digits are whole (``1,950``)."""
    if value is None:
        return "-"
    if value == 0:
        return "0"
    return _fixed(value, max(0, decimals(value, digits)), grouped=True)


def fmt_ci(m: MeanCI, scale: float = 1.0, digits: int = TEXT_DIGITS) -> str:
    """``mean`` or ``mean ± ci`` (scaled), the mean to the half-width's precision."""
    if m.mean is None:
        return "-"
    mean = m.mean * scale
    ci = clean_ci(mean, None if m.ci95 is None else m.ci95 * scale)
    if ci is None:
        return fmt_value(mean, digits)
    if ci == 0:
        return f"{fmt_value(mean, digits)} ± 0"
    places = _places(mean, ci, digits)
    return f"{_fixed(mean, places, True)} ± {_fixed(ci, decimals(ci, CI_DIGITS), True)}"


def csv_pair(m: MeanCI, scale: float = 1.0) -> tuple[str, str]:
    """The mean and half-width as CSV numbers: plain decimals, no separators, rounded as in
    text (4 significant digits for a mean without an interval); ``""`` for a missing value."""
    if m.mean is None:
        return "", ""
    mean = m.mean * scale
    ci = clean_ci(mean, None if m.ci95 is None else m.ci95 * scale)
    places = _places(mean, ci, CSV_DIGITS) if ci else max(0, decimals(mean, CSV_DIGITS))
    mean_text = "0" if mean == 0 else _fixed(mean, places, grouped=False)
    if ci is None:
        return mean_text, ""
    if ci == 0:
        return mean_text, "0"
    return mean_text, _fixed(ci, decimals(ci, CI_DIGITS), grouped=False)
