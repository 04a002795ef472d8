"""Images that run a broker the way the native runtime does (the Java brokers).

HiveMQ CE, Artemis and ActiveMQ Classic have no single binary to copy: the native runtime
writes their config and a ``java`` command line (their specs in
``mqbench/brokers/definitions/``). ``native_plan_files`` calls the target's native spec at
build time with the container's listen address (``0.0.0.0``) and port, in a scratch work
directory, and turns the result into build-context files:

- ``home/...``: every file the spec wrote (configs, symlinks), to be copied to ``home``
  inside the image (host paths in them rewritten to the image's paths);
- ``run``: a ``/bin/sh`` entrypoint that ``exec``s the spec's command line, with the
  image's ``options_env`` variable (the official image's JVM-options variable, e.g.
  ``JAVA_OPTS``) inserted before the class path, so a compose file's heap and CPU flags
  win over the spec's defaults (the JVM takes the last of a repeated flag);
- for a Maven distribution, its jars and compiled launcher under ``dist/``.
"""

from __future__ import annotations

import os
import shlex
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from mqbench.brokers.docker.image_recipes import (
    GeneratedFile,
    HostFacts,
    MissingInput,
    Resolved,
    Software,
    StagedFile,
    _debian,
)
from mqbench.errors import BrokerError

DIST = PurePosixPath("/opt/mqbench/dist")
"""Where a Maven distribution's jars and launcher lie in the image."""
JAVA = "/usr/bin/java"


@dataclass(frozen=True)
class NativeImage:
    """How one target's native launch becomes an image."""

    target: str
    home: PurePosixPath
    """Where the spec's work directory lies in the image."""
    options_env: str
    """The JVM-options variable the official image reads (and compose files set)."""
    port: int = 1883


def native_plan_files(image: NativeImage) -> tuple[list[GeneratedFile], list[StagedFile]]:
    """Run the target's native spec for the container; the files for the build context."""
    from mqbench.brokers.registry import get_definition

    definition = get_definition(image.target)
    if definition.native is None:
        raise MissingInput(f"{image.target} has no native spec")
    spec = definition.native()
    with tempfile.TemporaryDirectory(prefix="mqbench-image-") as tmp:
        work = Path(tmp) / "work"
        work.mkdir()
        try:
            plan = spec.prepare(Path(JAVA), work, "0.0.0.0", image.port, {})
        except BrokerError as exc:
            raise MissingInput(str(exc)) from exc
        rewrite: dict[str, str] = {str(work.resolve()): str(image.home)}
        staged: list[StagedFile] = []
        if definition.maven is not None:
            from mqbench.brokers.java import maven

            found = maven.installed(definition.maven)
            if found is None:
                raise MissingInput(
                    f"the {image.target} jars are not in the Maven cache (mqbench brokers fetch)"
                )
            rewrite[str(found.directory)] = str(DIST)
            for folder in (found.lib, found.launcher_classes):
                for path in sorted(p for p in folder.rglob("*") if p.is_file()):
                    arcname = f"dist/{path.relative_to(found.directory).as_posix()}"
                    staged.append(StagedFile(arcname, path))
        generated = _work_files(work, rewrite)
        argv = [_rewrite(arg, rewrite) for arg in plan.argv]
    generated.append(GeneratedFile("run", _run_script(image, argv).encode(), 0o755))
    return generated, staged


def _rewrite(text: str, rewrite: dict[str, str]) -> str:
    for old, new in rewrite.items():
        text = text.replace(old, new)
    return text


def _work_files(work: Path, rewrite: dict[str, str]) -> list[GeneratedFile]:
    files: list[GeneratedFile] = []
    for path in sorted(work.rglob("*")):
        arcname = f"home/{path.relative_to(work).as_posix()}"
        if path.is_symlink():
            files.append(GeneratedFile(arcname, b"", link=os.readlink(path)))
        elif path.is_dir():
            files.append(GeneratedFile(arcname + "/", b"", 0o755))
        else:
            text = _rewrite(path.read_text(encoding="utf-8"), rewrite)
            files.append(GeneratedFile(arcname, text.encode(), 0o644))
    return files


def _run_script(image: NativeImage, argv: list[str]) -> str:
    cut = next((i for i, a in enumerate(argv) if a in ("-cp", "-jar")), len(argv))
    head = " ".join(shlex.quote(a) for a in argv[:cut])
    tail = " ".join(shlex.quote(a) for a in argv[cut:])
    return (
        "#!/bin/sh\n"
        f"# {image.target} as mqbench's native runtime starts it "
        "(written by mqbench brokers build-images)\n"
        f"# ${image.options_env}: JVM options of the compose file (they win: the last of a\n"
        "# repeated JVM flag counts). Arguments (e.g. 'console') are ignored.\n"
        f"exec {head} ${image.options_env} {tail}\n"
    )


def java_image(image: NativeImage, software: Software) -> Resolved:
    """A Maven-distributed Java broker on the jre layer."""
    generated, staged = native_plan_files(image)
    return Resolved(
        version=software.version,
        software=(software,),
        build_args={"HOME_DIR": str(image.home)},
        files=tuple(staged),
        generated=tuple(generated),
    )


def resolve_hivemq(host: HostFacts) -> Resolved:
    """HiveMQ CE from the Maven cache."""
    from mqbench.brokers.definitions.hivemq import DISTRIBUTION

    image = NativeImage("hivemq", PurePosixPath("/opt/hivemq"), "JAVA_OPTS")
    source = "Maven Central (mqbench brokers fetch), HiveMQLauncher"
    return java_image(image, Software("hivemq-ce", DISTRIBUTION.version, source))


def resolve_artemis(host: HostFacts) -> Resolved:
    """ActiveMQ Artemis from the Maven cache."""
    from mqbench.brokers.definitions.artemis import DISTRIBUTION

    image = NativeImage("artemis", PurePosixPath("/var/lib/artemis-instance"), "JAVA_ARGS_APPEND")
    source = "Maven Central (mqbench brokers fetch), ArtemisLauncher"
    return java_image(image, Software("activemq-artemis", DISTRIBUTION.version, source))


def resolve_activemq(host: HostFacts) -> Resolved:
    """ActiveMQ Classic from Debian's packages, laid out as /opt/apache-activemq."""
    packages = _debian("activemq", "libmqtt-client-java")(host)
    image = NativeImage("activemq", PurePosixPath("/opt/apache-activemq"), "ACTIVEMQ_OPTS_MEMORY")
    generated, _ = native_plan_files(image)
    return Resolved(
        version=packages.version,
        software=packages.software,
        build_args={**packages.build_args, "HOME_DIR": str(image.home)},
        generated=tuple(generated),
    )
