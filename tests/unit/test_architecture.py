"""The import rules of docs/architecture.md, checked on the source of every module."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import mqbench

ROOT = Path(mqbench.__file__).parent
TESTS = Path(__file__).resolve().parents[1]

LAYERS: dict[str, int] = {
    "errors": 0,
    "endpoint": 0,
    "process": 0,
    "wire": 1,
    "scenario": 2,
    "records": 2,
    "brokers": 3,
    "faults": 3,
    "builtin_broker": 3,
    "transports": 3,
    "workload": 4,
    "analysis": 4,
    "calibration": 5,
    "report": 5,
    "cli": 6,
    "__main__": 7,
}
"""Layer of each top-level part of the ``mqbench`` package (docs/architecture.md)."""

SAME_LAYER_ALLOWED: set[tuple[str, str]] = {
    ("scenario", "records"),
    ("records", "scenario"),
}
"""Same-layer imports the table allows (importer, imported)."""

FORBIDDEN: dict[str, set[str]] = {
    "analysis": {"workload", "brokers", "transports", "faults", "builtin_broker"},
    "builtin_broker": {"transports"},
}
"""Imports ruled out beyond the layers (docs/architecture.md, "Rules beyond the layers")."""

ONLY_IN: dict[str, set[str]] = {
    "typer": {"cli"},
    "rich": {"cli"},
    # workload: only workload.spark_engine, which runs load as a Spark barrier stage
    # (checked module by module below).
    "pyspark": {"analysis", "workload"},
    # the compiled core (core/, docs/performance.md): the engine's hot path only
    "mqbench_core": {"workload"},
}
"""Third-party packages only some parts may import."""

ONLY_MODULES: dict[str, dict[str, set[str]]] = {
    "pyspark": {"workload": {"mqbench.workload.spark_engine"}},
    "mqbench_core": {"workload": {"mqbench.workload.compiled", "mqbench.workload.hot_path"}},
}
"""Within a part ONLY_IN allows, the modules that may import the package."""


@dataclass(frozen=True)
class Import:
    """One import statement of a module: what it names and where."""

    module: str
    """The importing module, dotted (``mqbench.workload.run``)."""
    target: str
    """The imported module, dotted and absolute."""
    line: int


def part_of(dotted: str) -> str:
    """The top-level part of ``mqbench`` a dotted module name belongs to."""
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> Iterator[Import]:
    """Every import in ``path``, including those inside functions (lazy imports count)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(name, alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if target == "mqbench":
                # ``from mqbench import x``: x is the imported part, or the package's own
                # ``__version__`` (the root package imports nothing of mqbench).
                for alias in node.names:
                    is_part = (ROOT / alias.name).is_dir() or (ROOT / f"{alias.name}.py").exists()
                    yield Import(
                        name, f"mqbench.{alias.name}" if is_part else "mqbench", node.lineno
                    )
            else:
                yield Import(name, target, node.lineno)


def all_imports() -> list[Import]:
    return [imp for path in sorted(ROOT.rglob("*.py")) for imp in imports_of(path)]


IMPORTS = all_imports()


def layer_violations(imports: list[Import]) -> list[str]:
    """Imports that point up a layer, across a layer, or break a rule beyond the layers."""
    problems = []
    for imp in imports:
        if not imp.target.startswith("mqbench."):
            continue
        if imp.target == "mqbench" or imp.module.endswith(".__main__"):
            continue  # the root package only holds the version; ``-m`` entry points are programs
        src, dst = part_of(imp.module), part_of(imp.target)
        if src in ("__init__", dst) or dst in ("__init__", "__main__"):
            continue
        where = f"{imp.module}:{imp.line} imports {imp.target}"
        if src not in LAYERS or dst not in LAYERS:
            problems.append(f"{where}: part without a layer in docs/architecture.md")
        elif LAYERS[dst] > LAYERS[src]:
            problems.append(f"{where}: layer {LAYERS[src]} must not import layer {LAYERS[dst]}")
        elif LAYERS[dst] == LAYERS[src] and (src, dst) not in SAME_LAYER_ALLOWED:
            problems.append(f"{where}: {src} and {dst} are on the same layer")
        elif dst in FORBIDDEN.get(src, set()):
            problems.append(f"{where}: {src} must not import {dst}")
    return problems


def third_party_violations(imports: list[Import]) -> list[str]:
    problems = []
    for imp in imports:
        top = imp.target.split(".")[0]
        allowed = ONLY_IN.get(top)
        if allowed is not None and part_of(imp.module) not in allowed:
            problems.append(f"{imp.module}:{imp.line} imports {imp.target}: only {allowed}")
        modules = ONLY_MODULES.get(top, {}).get(part_of(imp.module))
        if modules is not None and imp.module not in modules:
            problems.append(f"{imp.module}:{imp.line} imports {imp.target}: only {modules}")
    return problems


def test_every_import_points_down_the_layers_of_the_architecture_page() -> None:
    assert layer_violations(IMPORTS) == []


def test_typer_and_rich_are_imported_only_by_the_cli_and_pyspark_only_by_the_analysis() -> None:
    assert third_party_violations(IMPORTS) == []


def test_within_the_engine_only_the_spark_engine_may_import_pyspark() -> None:
    allowed = Import("mqbench.workload.spark_engine", "pyspark", 1)
    other = Import("mqbench.workload.run", "pyspark.sql", 2)
    assert third_party_violations([allowed]) == []
    assert third_party_violations([other]) == [
        "mqbench.workload.run:2 imports pyspark.sql: only {'mqbench.workload.spark_engine'}"
    ]


def test_only_the_compiled_publishing_and_the_engine_choice_import_the_compiled_core() -> None:
    allowed = Import("mqbench.workload.compiled", "mqbench_core", 1)
    worker = Import("mqbench.workload.worker", "mqbench_core", 2)
    analysis = Import("mqbench.analysis.kernel", "mqbench_core", 3)
    assert third_party_violations([allowed]) == []
    problems = third_party_violations([worker, analysis])
    assert [p.split(" only ")[0] for p in problems] == [
        "mqbench.workload.worker:2 imports mqbench_core:",
        "mqbench.analysis.kernel:3 imports mqbench_core:",
    ]


def test_every_top_level_part_of_the_package_has_a_layer() -> None:
    parts = {
        p.stem if p.is_file() else p.name
        for p in ROOT.iterdir()
        if (p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists()))
    } - {"__init__"}
    assert parts - set(LAYERS) == set()


def script_blocks(tree: ast.Module) -> set[int]:
    """Ids of the nodes under ``if __name__ == "__main__":`` (a module run as a program)."""
    inside: set[int] = set()
    for node in tree.body:
        test = node.test if isinstance(node, ast.If) else None
        if (
            isinstance(test, ast.Compare)
            and isinstance(test.left, ast.Name)
            and test.left.id == "__name__"
        ):
            inside.update(id(n) for n in ast.walk(node))
    return inside


def test_only_the_cli_exits_the_process() -> None:
    offenders = []
    for path in sorted(ROOT.rglob("*.py")):
        name = module_name(path)
        if part_of(name) in ("cli", "__main__") or path.name == "__main__.py":
            continue  # a package's ``python -m`` entry point is a program of its own
        tree = ast.parse(path.read_text())
        programs = script_blocks(tree)
        for node in ast.walk(tree):
            if (
                id(node) not in programs
                and isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "exit"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "sys"
            ):
                offenders.append(f"{name}:{node.lineno}")
    assert offenders == []


def print_calls(tree: ast.Module) -> list[int]:
    """Lines of ``print(...)`` calls and ``sys.stdout``/``sys.stderr`` writes outside
    ``if __name__ == "__main__":`` blocks."""
    programs = script_blocks(tree)
    lines = []
    for node in ast.walk(tree):
        if id(node) in programs or not isinstance(node, ast.Call):
            continue
        func = node.func
        if (isinstance(func, ast.Name) and func.id == "print") or (
            isinstance(func, ast.Attribute)
            and func.attr == "write"
            and isinstance(func.value, ast.Attribute)
            and func.value.attr in ("stdout", "stderr")
            and isinstance(func.value.value, ast.Name)
            and func.value.value.id == "sys"
        ):
            lines.append(node.lineno)
    return lines


def test_only_the_cli_prints() -> None:
    offenders = []
    for path in sorted(ROOT.rglob("*.py")):
        name = module_name(path)
        if part_of(name) in ("cli", "__main__") or path.name == "__main__.py":
            continue  # a package's ``python -m`` entry point is a program of its own
        tree = ast.parse(path.read_text())
        if script_blocks(tree):
            continue  # a ``python -m`` program (fault proxy, zenoh router): its ready line
        offenders += [f"{name}:{line}" for line in print_calls(tree)]
    assert offenders == []


def test_the_print_check_sees_print_and_stream_writes_but_not_script_blocks() -> None:
    tree = ast.parse(
        "import sys\nprint('x')\nsys.stderr.write('y')\n"
        "if __name__ == '__main__':\n    print('program')\n"
    )
    assert print_calls(tree) == [2, 3]


@pytest.mark.parametrize(
    ("module", "target", "problem"),
    [
        ("mqbench.records.manifest", "mqbench.workload.run", "must not import layer 4"),
        ("mqbench.workload.search", "mqbench.analysis.api", "on the same layer"),
        ("mqbench.analysis.run_summaries", "mqbench.brokers.registry", "analysis must not import"),
        ("mqbench.builtin_broker.connection", "mqbench.transports.mqtt", "same layer"),
    ],
)
def test_the_checker_catches_an_import_that_breaks_a_rule(
    module: str, target: str, problem: str
) -> None:
    (found,) = layer_violations([Import(module, target, 1)])
    assert problem in found


def test_test_modules_have_unique_basenames_so_pytest_collects_them_all() -> None:
    names: dict[str, list[str]] = {}
    for path in TESTS.rglob("test_*.py"):
        names.setdefault(path.name, []).append(str(path.relative_to(TESTS)))
    assert {n: p for n, p in names.items() if len(p) > 1} == {}


ENGINE_DOORS: frozenset[str] = frozenset(
    {
        "mqbench.transports.base",
        "mqbench.transports.events",
        "mqbench.transports.registry",
        "mqbench.transports.write_batch",
        "mqbench.brokers.base",
        "mqbench.brokers.registry",
        "mqbench.brokers.runtime.registry",
        "mqbench.brokers.runtime.liveness",
        "mqbench.brokers.resources.sampler",
        "mqbench.brokers.resources.profiles",
        "mqbench.brokers.resources.native_profiles",
        "mqbench.brokers.security.tls_material",
        "mqbench.faults.driver",
    }
)
"""The modules through which the engine reaches transports, brokers and faults."""


def test_the_engine_reaches_transports_brokers_and_faults_only_through_their_contracts() -> None:
    behind = [
        f"{imp.module}:{imp.line} imports {imp.target}"
        for imp in IMPORTS
        if part_of(imp.module) == "workload"
        and part_of(imp.target) in ("transports", "brokers", "faults")
        and imp.target not in ENGINE_DOORS
    ]
    assert behind == []
