"""``mqbench brokers up|down|status|logs|fetch|build-images|options``: work with a broker by
hand, and list the broker options each target takes.

Each command parses its arguments, makes one call into ``mqbench/brokers/runtime/manage.py`` (which
starts, records, stops and inspects the brokers) and prints the typed result.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from mqbench.brokers.docker.image_engine import build_local_images
from mqbench.brokers.docker.images import buildable_targets
from mqbench.brokers.registry import option_models
from mqbench.brokers.resources.profiles import profile_names
from mqbench.brokers.runtime.manage import (
    broker_logs,
    broker_statuses,
    fetch_java_brokers,
    start_broker,
    stop_broker,
)
from mqbench.brokers.runtime.options import by_model, option_docs, options_markdown
from mqbench.cli.errors import guarded

console = Console(highlight=False, soft_wrap=True)

brokers_app = typer.Typer(
    help=(
        "Start, stop and inspect brokers by hand.\n\n"
        "Examples:\n\n"
        "  mqbench brokers up mosquitto\n\n"
        "  mqbench brokers up emqx --runtime docker --profile 1cpu-2g\n\n"
        "  mqbench brokers status\n\n"
        "  mqbench brokers logs emqx --runtime docker\n\n"
        "  mqbench brokers down emqx"
    ),
    no_args_is_help=True,
)

RuntimeOption = Annotated[
    str, typer.Option("--runtime", help="native (local process) or docker (compose project).")
]
TargetArg = Annotated[str, typer.Argument(metavar="TARGET", help="A target, e.g. mosquitto.")]


@brokers_app.command("up")
def up(
    target: TargetArg,
    runtime: RuntimeOption = "native",
    profile: Annotated[
        str | None,
        typer.Option(
            "--profile",
            help="resource profile (container limits, or a cgroup for native): "
            + ", ".join(profile_names()),
        ),
    ] = None,
    port: Annotated[
        int | None, typer.Option("--port", help="Host port for clients (default: a free one).")
    ] = None,
    timeout: Annotated[
        float, typer.Option("--timeout", help="Seconds to wait until the broker is ready.")
    ] = 60.0,
) -> None:
    """Start a broker and leave it running.

    Example: mqbench brokers up emqx --runtime docker --profile 2cpu-4g
    """

    def go() -> None:
        state = start_broker(target, runtime, profile, port, timeout)
        where = f"{state.host}:{state.port}"
        extra = f", project {state.project}" if state.project else f", pid {state.pid}"
        console.print(f"{target} is up ({runtime}{extra}) at {where}")
        console.print(f"stop it with: mqbench brokers down {target} --runtime {runtime}")

    guarded(go)


@brokers_app.command("down")
def down(
    target: TargetArg,
    runtime: Annotated[
        str | None, typer.Option("--runtime", help="Only this runtime (default: all).")
    ] = None,
) -> None:
    """Stop a broker started with `mqbench brokers up`.

    Example: mqbench brokers down mosquitto
    """

    def go() -> None:
        for stopped in stop_broker(target, runtime):
            state = stopped.state
            console.print(f"{state.target} ({state.runtime}): {stopped.outcome}")

    guarded(go)


@brokers_app.command("status")
def status(
    target: Annotated[
        str | None, typer.Argument(metavar="[TARGET]", help="Only this target.")
    ] = None,
) -> None:
    """Show brokers started with `mqbench brokers up`.

    Example: mqbench brokers status
    """

    def go() -> None:
        found = broker_statuses(target)
        if not found.brokers:
            console.print(f"no brokers started by hand (state folder: {found.folder})")
            return
        table = Table(show_edge=False)
        for column in ("target", "runtime", "status", "endpoint", "pid/project", "profile"):
            table.add_column(column)
        for row in found.brokers:
            s = row.state
            table.add_row(
                s.target,
                s.runtime,
                row.status,
                f"{s.host}:{s.port}",
                str(s.pid) if s.pid is not None else str(s.project),
                s.profile or "-",
            )
        console.print(table)

    guarded(go)


@brokers_app.command("options")
def options(
    target: Annotated[
        str | None, typer.Argument(metavar="[TARGET]", help="Only this target.")
    ] = None,
    markdown: Annotated[
        bool, typer.Option("--markdown", help="A Markdown table (as in docs/brokers.md).")
    ] = False,
) -> None:
    """Show the broker options (broker.options) a target takes: type, default, what it sets.

    Example: mqbench brokers options nats
    """

    def go() -> None:
        models = option_models(target)
        if markdown:
            console.print(options_markdown(models), markup=False, end="")
            return
        table = Table(show_edge=False)
        for column in ("targets", "option", "type", "default", "what it sets"):
            # An option and its default stay whole, to be copied into a scenario.
            table.add_column(column, no_wrap=column in ("option", "default"))
        for names, model in by_model(models):
            for row in option_docs(model):
                table.add_row(names, row.name, row.type, row.default, row.description)
        console.print(table, markup=False)

    guarded(go)


@brokers_app.command("fetch")
def fetch(
    targets: Annotated[
        list[str] | None,
        typer.Argument(metavar="[TARGET]...", help="Java brokers to fetch (default: all)."),
    ] = None,
) -> None:
    """Fetch the Java brokers' jars from Maven Central into the cache (needs mvn and javac).

    Example: mqbench brokers fetch artemis hivemq
    """

    def go() -> None:
        for done in fetch_java_brokers(targets):
            what = "already in the cache" if done.already_cached else f"fetched {done.jars} jars"
            console.print(f"{done.target} {done.version}: {what} ({done.directory})")

    guarded(go)


@brokers_app.command("logs")
def logs(
    target: TargetArg,
    runtime: Annotated[
        str | None, typer.Option("--runtime", help="Which runtime's broker.")
    ] = None,
    lines: Annotated[int, typer.Option("--lines", "-n", help="How many lines.")] = 50,
) -> None:
    """Print the last log lines of a broker started with `mqbench brokers up`.

    Example: mqbench brokers logs rabbitmq-mqtt --runtime docker -n 100
    """

    def go() -> None:
        text = broker_logs(target, runtime, lines)
        console.print(text or "(the log is empty)", markup=False)

    guarded(go)


@brokers_app.command("build-images")
def build_images(
    targets: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[TARGET]...",
            help="Images to build (default: all): " + ", ".join(buildable_targets()) + ".",
        ),
    ] = None,
) -> None:
    """Build local broker images from Debian, Maven, PyPI and Go packages (no registry).

    Each is tagged mqbench-local/<target>:<version> and labelled with the software inside;
    up-to-date images are kept. The docker runtime runs an official image when the engine
    has it or can pull it, else the local one (docs/docker.md).

    Example: mqbench brokers build-images mosquitto nats
    """

    def go() -> None:
        results = build_local_images(list(targets or []), lambda line: console.print(line))
        table = Table(show_edge=False)
        for column in ("image", "action", "seconds", "MB", "main software"):
            table.add_column(column)
        for r in results:
            main = f"{r.software[0].name} {r.software[0].version}" if r.software else "-"
            table.add_row(r.ref, r.action, f"{r.seconds:.1f}", f"{r.size / 1e6:.0f}", main)
        console.print(table)
        console.print("every piece of software inside: the image's org.mqbench.software label")

    guarded(go)
