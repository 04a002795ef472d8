"""A fake broker in one module, for the test that adds it with one registry entry.

Imported, this module is a broker definition like those in ``mqbench/brokers/definitions/``
(docs/extending.md, "Add a broker"): a target row, a native spec that writes a config file,
checks its options, reports a version and probes readiness. Run as a program it is the
broker: an asyncio TCP server on the configured loopback port that answers a RESP ``PING``
with ``+PONG`` (just enough for ``probes.redis_probe``) and exits 0 on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field

from mqbench.brokers.definition import BrokerDefinition, TargetDefinition
from mqbench.brokers.runtime.native_spec import (
    LaunchPlan,
    NativeSpec,
    first_match,
    run_for_output,
)
from mqbench.brokers.runtime.options import BrokerOptionsModel, parse_options
from mqbench.brokers.runtime.probes import redis_probe

VERSION = "1.2.3"


class FakeOptions(BrokerOptionsModel):
    """The fake broker's options."""

    banner: str = Field("fake broker", description="printed to the log when the server listens")


class FakeSpec(NativeSpec):
    """This file run by the current interpreter, with a JSON config in the work directory."""

    options_model = FakeOptions
    name = "fake"
    executable = "python"
    install_hint = "nothing to install (tests/integration/fake_broker.py)"

    def find_binary(self) -> Path | None:
        """The interpreter running the tests."""
        return Path(sys.executable)

    def version(self, binary: Path) -> str:
        """Parse ``fake_broker.py --version`` ("fake-broker 1.2.3")."""
        out = run_for_output([str(binary), __file__, "--version"])
        return first_match(r"fake-broker (\S+)", out)

    def prepare(
        self, binary: Path, workdir: Path, host: str, port: int, options: Mapping[str, Any]
    ) -> LaunchPlan:
        """Write ``fake.json`` and return ``python fake_broker.py --config fake.json``."""
        opts = parse_options("fake", FakeOptions, options)
        text = json.dumps({"host": host, "port": port, "banner": opts.banner}) + "\n"
        config = workdir / "fake.json"
        config.write_text(text, encoding="utf-8")
        argv = [str(binary), __file__, "--config", str(config)]
        return LaunchPlan(argv, config, text, settings={"banner": opts.banner})

    def check_ready(self, host: str, port: int, timeout_s: float) -> bool:
        """A RESP ``PING`` answered by ``+PONG``."""
        return redis_probe(host, port, timeout_s)


DEFINITION = BrokerDefinition(
    "fake",
    (
        TargetDefinition(
            "fake",
            "Fake broker",
            "redis",
            "A test broker that only answers PING",
            6399,
            native=FakeSpec,
            native_source="tests/integration/fake_broker.py",
        ),
    ),
)
"""The fake broker: native only (no compose entry), no profile knob, no hooks."""


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while line := await reader.readline():
        if line.strip().upper() == b"PING":
            writer.write(b"+PONG\r\n")
            await writer.drain()
    writer.close()


async def _serve(config: Mapping[str, Any]) -> None:
    server = await asyncio.start_server(_handle, config["host"], int(config["port"]))
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print(f"{config['banner']} {VERSION} listening on {config['host']}:{config['port']}")
    sys.stdout.flush()
    async with server:
        await stop.wait()


def main() -> None:
    """``--version``, or serve with ``--config``."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--version", action="store_true")
    parser.add_argument("--config", type=Path)
    args = parser.parse_args()
    if args.version:
        print(f"fake-broker {VERSION}")
        return
    asyncio.run(_serve(json.loads(args.config.read_text(encoding="utf-8"))))


if __name__ == "__main__":
    main()
