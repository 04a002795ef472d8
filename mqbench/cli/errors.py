"""Map typed errors to one-line messages and exit codes; tracebacks only with MQBENCH_DEBUG=1."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TypeVar

from rich.text import Text

from mqbench.cli.output import err_console
from mqbench.errors import MqbenchError

T = TypeVar("T")


def debug_enabled() -> bool:
    """True when MQBENCH_DEBUG asks for tracebacks."""
    return os.environ.get("MQBENCH_DEBUG", "") not in ("", "0", "false", "no")


def fail(message: str, code: int) -> None:
    """Print ``error: message`` to stderr and exit with ``code``."""
    err_console.print(Text.assemble(("error: ", "bold red"), message))
    sys.exit(code)


def guarded(func: Callable[[], T]) -> T:
    """Run ``func``; turn expected failures into a clear line and an exit code."""
    try:
        return func()
    except MqbenchError as exc:
        if debug_enabled():
            raise
        fail(str(exc), exc.exit_code)
    except KeyboardInterrupt:
        if debug_enabled():
            raise
        fail("interrupted", 130)
    except Exception as exc:
        if debug_enabled():
            raise
        fail(
            f"internal error: {type(exc).__name__}: {exc} (set MQBENCH_DEBUG=1 for the traceback)",
            1,
        )
    raise AssertionError("unreachable")  # pragma: no cover
