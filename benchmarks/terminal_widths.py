"""Nothing cut at 80, 100 and 120 columns: ``run``, ``--dry-run``, ``compare`` and
``targets`` as a person sees them, in real terminals (tmux panes of those widths).

For every width it runs a real short quickstart (brokers, load, Spark analysis), the
``--dry-run`` of scenarios with long cell ids, ``mqbench targets`` and ``mqbench compare``
of two of those runs, captures the pane line by line as the terminal drew it, and checks:

- no ``…`` anywhere (a value Rich squeezed);
- every cell id whole on one line of the pane (what ``--only`` needs);
- every number of the results table (sent, received, throughput, p50, p99, as the table
  formats them) whole on one line;
- how many lines the terminal had to wrap (reported; tables and progress lines should need
  none, long prose lines may).

Needs tmux (Debian: ``apt-get install tmux``). Bounded: every command has a timeout, each
tmux session is named for this process and killed at the end.

    .venv/bin/python benchmarks/terminal_widths.py [--widths 80,100,120] [--keep DIR]

Exit code 1 when anything was cut.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MQBENCH = str(ROOT / ".venv" / "bin" / "mqbench")
COMMAND_TIMEOUT_S = 900.0
SOCKET = f"mqbench-widths-{os.getpid()}"
"""A tmux server of our own (``tmux -L``): nobody else's sessions are touched."""
QUICK = ["--set", "workload.warmup=2s", "--set", "workload.duration=5s"]
DRY_RUNS: tuple[tuple[str, list[str]], ...] = (
    ("scenarios/tbmq-p2p.yaml", []),
    ("scenarios/paper-exp1-latency-vs-payload.yaml", []),
    ("scenarios/paper-exp2-throughput-pairs.yaml", ["--set", "workload.pairs=[500,9968]"]),
)


@dataclass
class Check:
    """What one command looked like at one width."""

    width: int
    command: str
    lines: int = 0
    wrapped: int = 0
    cut: list[str] = field(default_factory=list)


def tmux(*args: str) -> str:
    """Run a tmux command (bounded) and return its stdout."""
    done = subprocess.run(
        ["tmux", "-L", SOCKET, *args], capture_output=True, text=True, timeout=30, check=True
    )
    return done.stdout


@dataclass
class Live:
    """Progress lines seen while a command ran (the live line is transient: polled)."""

    stages: set[str] = field(default_factory=set)
    longest: int = 0
    samples: list[str] = field(default_factory=list)


STAGES = ("connecting", "warm-up", "measuring", "draining", "stopping")


def in_pane(
    width: int, argv: list[str], session: str, live: Live | None = None
) -> tuple[list[str], list[str]]:
    """Run ``argv`` in a fresh detached pane ``width`` columns wide; return the pane's lines
    as drawn and joined (``-J``: wrapped lines put back together). With ``live``, the
    visible pane is polled while it runs and every progress line is kept."""
    channel = f"{session}-done"
    command = f"{shlex.join(argv)}; tmux -L {SOCKET} wait-for -S {channel}; sleep 600"
    tmux("new-session", "-d", "-s", session, "-x", str(width), "-y", "50", command)
    tmux("set-option", "-t", session, "history-limit", "20000")
    try:
        waiter = subprocess.Popen(["tmux", "-L", SOCKET, "wait-for", channel])
        deadline = time.monotonic() + COMMAND_TIMEOUT_S
        while waiter.poll() is None:
            if time.monotonic() > deadline:
                waiter.kill()
                raise RuntimeError(f"{shlex.join(argv)}: no end within {COMMAND_TIMEOUT_S} s")
            if live is not None:
                _sample(session, live)
            time.sleep(0.5)
        time.sleep(0.5)
        drawn = tmux("capture-pane", "-p", "-t", session, "-S", "-", "-E", "-").splitlines()
        joined = tmux("capture-pane", "-p", "-J", "-t", session, "-S", "-", "-E", "-")
        return _trim(drawn), _trim(joined.splitlines())
    finally:
        subprocess.run(
            ["tmux", "-L", SOCKET, "kill-session", "-t", session], timeout=30, check=False
        )


def _sample(session: str, live: Live) -> None:
    for line in tmux("capture-pane", "-p", "-J", "-t", session).splitlines():
        words = line.split()
        if not words or "qos" not in words[0] or words[0].endswith(":"):
            continue  # not "<cell id>  <stage> ..."
        stage = next((w for w in words[1:2] if w in STAGES), None)
        if stage is None:
            continue
        live.stages.add(stage)
        live.longest = max(live.longest, len(line.rstrip()))
        if line.rstrip() not in live.samples:
            live.samples.append(line.rstrip())


def _trim(lines: list[str]) -> list[str]:
    while lines and not lines[-1].strip():
        lines.pop()
    return [line.rstrip() for line in lines]


def judge(width: int, command: str, drawn: list[str], joined: list[str], whole: set[str]) -> Check:
    """Compare what the pane shows with the values that must be whole on a line."""
    result = Check(width, command, len(drawn), max(0, len(drawn) - len(joined)))
    if any("…" in line for line in drawn):
        result.cut.append("… in the output")
    for value in sorted(whole):
        if not any(value in line for line in drawn):
            result.cut.append(value)
    return result


def run_values(run_dir: Path) -> tuple[set[str], set[str]]:
    """The cell ids of a run and the numbers its results table shows (as formatted)."""
    sys.path.insert(0, str(ROOT))
    from mqbench.analysis.summary import read_summary_json
    from mqbench.cli.tables import ms, num

    ids, numbers = set(), set()
    for path in sorted(run_dir.glob("cells/*/summary.json")):
        s = read_summary_json(path)
        ids.add(s.cell_id)
        lat = s.latency
        numbers |= {f"{s.sent:,}", f"{s.received:,}", num(s.throughput_msg_s)}
        if lat is not None:
            numbers |= {ms(lat.p50_us), ms(lat.p99_us)}
    return ids, numbers


def dry_run_ids(scenario: str, settings: list[str]) -> set[str]:
    """The cell ids a scenario expands to."""
    from mqbench.scenario.loader import load_scenario
    from mqbench.scenario.matrix import expand

    overrides = [settings[i + 1] for i in range(0, len(settings), 2)]
    loaded, _ = load_scenario(ROOT / scenario, overrides)
    return {c.id for c in expand(loaded)}


def one_width(width: int, out: Path, runs: list[Path], phase: str) -> list[Check]:
    """Every command at one width (the panes are saved as ``out/panes/<width>-<n>.txt``):
    ``phase`` ``run`` runs the quickstart; ``rest`` the dry runs, targets and compare."""
    checks: list[Check] = []
    panes = out / "panes"
    panes.mkdir(parents=True, exist_ok=True)

    def check(command: str, drawn: list[str], joined: list[str], whole: set[str]) -> Check:
        name = f"{width}-{command.replace(' ', '_').replace('/', '_')}.txt"
        (panes / name).write_text(f"$ {command}\n" + "\n".join(drawn) + "\n")
        return judge(width, command, drawn, joined, whole)

    session = f"mqbench-widths-{os.getpid()}-{width}"
    if phase == "run":
        root = out / f"w{width}"
        argv = [MQBENCH, "run", str(ROOT / "scenarios/quickstart.yaml"), "--out", str(root)]
        live = Live()
        drawn, joined = in_pane(width, [*argv, *QUICK], session, live)
        run_dir = next((root / "quickstart").iterdir())
        runs.append(run_dir)
        ids, numbers = run_values(run_dir)
        checks.append(check("run quickstart", drawn, joined, ids | numbers))
        (panes / f"{width}-progress.txt").write_text("\n".join(live.samples) + "\n")
        progress = Check(width, "run: progress lines", len(live.samples))
        progress.wrapped = sum(1 for line in live.samples if len(line) >= width)
        if not {"warm-up", "measuring"} <= live.stages:
            progress.cut.append(f"stages seen: {sorted(live.stages)}")
        checks.append(progress)
        return checks
    for scenario, settings in DRY_RUNS:
        argv = [MQBENCH, "run", str(ROOT / scenario), "--dry-run", "--out", str(out), *settings]
        drawn, joined = in_pane(width, argv, session)
        name = f"run {Path(scenario).stem} --dry-run"
        checks.append(check(name, drawn, joined, dry_run_ids(scenario, settings)))
    drawn, joined = in_pane(width, [MQBENCH, "targets"], session)
    checks.append(check("targets", drawn, joined, {"tbmq-style", "rabbitmq-mqtt"}))
    argv = [MQBENCH, "compare", str(runs[0]), str(runs[-1]), "--allow-invalid"]
    drawn, joined = in_pane(width, [*argv, "--allow-generator-bound"], session)
    checks.append(check("compare", drawn, joined, run_values(runs[-1])[0]))
    return checks


def main() -> int:
    """Run every width, print one line per (width, command), exit 1 if anything was cut."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--widths", default="80,100,120")
    parser.add_argument("--keep", type=Path, help="keep the runs in this folder")
    args = parser.parse_args()
    if shutil.which("tmux") is None:
        print("tmux is not installed (Debian: apt-get install tmux)", file=sys.stderr)
        return 2
    widths = [int(w) for w in args.widths.split(",")]
    out = args.keep or Path(tempfile.mkdtemp(prefix="mqbench-widths-"))
    runs: list[Path] = []
    checks: list[Check] = []
    try:
        for phase in ("run", "rest"):
            for width in widths:
                checks.extend(one_width(width, out, runs, phase))
    finally:
        subprocess.run(["tmux", "-L", SOCKET, "kill-server"], timeout=30, check=False)
        if args.keep is None:
            shutil.rmtree(out, ignore_errors=True)
    load = os.getloadavg()
    print(f"load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"{'width':>5}  {'command':<48} {'lines':>5} {'wrapped':>7}  cut")
    for c in checks:
        cut = ", ".join(c.cut) if c.cut else "none"
        print(f"{c.width:>5}  {c.command:<48} {c.lines:>5} {c.wrapped:>7}  {cut}")
    print(json.dumps({"cut": sum(len(c.cut) for c in checks)}))
    return 1 if any(c.cut for c in checks) else 0


if __name__ == "__main__":
    sys.exit(main())
