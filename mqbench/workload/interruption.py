"""How a run that a signal stopped ends: the error it raises and the signal's name."""

from __future__ import annotations

import signal

from mqbench.errors import MqbenchError
from mqbench.process import interrupts


class RunInterrupted(MqbenchError):
    """SIGINT or SIGTERM stopped the run; records so far are flushed, the manifest says so.

    The exit code follows the shell convention: 130 for SIGINT, 143 for SIGTERM.
    """

    exit_code = 130

    def __init__(self, message: str, signum: int = signal.SIGINT) -> None:
        super().__init__(message)
        self.signum = int(signum)
        self.exit_code = interrupts.exit_code_for(signum)


def stop_signal(exc: BaseException | None = None) -> int:
    """The signal that stopped the run: the exception's, else the controller's, else SIGINT."""
    signum = getattr(exc, "signum", None)
    if signum is None:
        stop = interrupts.active()
        signum = stop.signum if stop is not None else None
    return int(signum) if signum is not None else int(signal.SIGINT)


def signal_text(signum: int) -> str:
    """``SIGINT (Ctrl-C)``, ``SIGTERM``, ...: how a signal is named in messages."""
    if signum == signal.SIGINT:
        return "SIGINT (Ctrl-C)"
    return signal.Signals(signum).name
