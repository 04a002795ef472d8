"""Function length in ``mqbench/``: no body over 80 lines unless pyproject.toml lists it as
debt with a reason (``[tool.mqbench.long-functions]``), and no listed entry that is no
longer long."""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from pathlib import Path

import mqbench

ROOT = Path(mqbench.__file__).parent
PYPROJECT = ROOT.parent / "pyproject.toml"
MAX_BODY_LINES = 80


def body_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from the first statement after the docstring to the end: a Typer command's
    option declarations and a docstring are not logic."""
    body = node.body
    first = body[0]
    if (
        len(body) > 1
        and isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        first = body[1]
    return (node.end_lineno or node.lineno) - first.lineno + 1


def long_functions(source: str, module: str) -> Iterator[tuple[str, int]]:
    """``module:Qualified.name`` and body length of every function over the bound."""

    def visit(node: ast.AST, prefix: str) -> Iterator[tuple[str, int]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                lines = body_lines(child)
                if lines > MAX_BODY_LINES:
                    yield f"{module}:{name}", lines
                yield from visit(child, f"{name}.<locals>.")
            elif isinstance(child, ast.ClassDef):
                yield from visit(child, f"{prefix}{child.name}.")
            else:
                yield from visit(child, prefix)

    yield from visit(ast.parse(source), "")


def package_long_functions() -> dict[str, int]:
    found: dict[str, int] = {}
    for path in sorted(ROOT.rglob("*.py")):
        module = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts)
        found.update(long_functions(path.read_text(encoding="utf-8"), module))
    return found


def listed_debt() -> dict[str, str]:
    config = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))
    debt: dict[str, str] = config["tool"]["mqbench"]["long-functions"]
    return debt


def test_no_function_body_runs_over_80_lines_unless_listed_as_debt_with_a_reason() -> None:
    debt = listed_debt()
    unlisted = {name: n for name, n in package_long_functions().items() if name not in debt}
    assert unlisted == {}, "shorten these, or list them with a reason in pyproject.toml"


def test_every_listed_long_function_is_still_long_and_has_a_reason() -> None:
    debt = listed_debt()
    stale = set(debt) - set(package_long_functions())
    assert stale == set(), "no longer over 80 lines: remove from pyproject.toml"
    assert [name for name, reason in debt.items() if not reason.strip()] == []


def statements(indent: int, count: int) -> list[str]:
    return [" " * indent + f"x{i} = {i}" for i in range(count)]


def test_the_length_check_sees_methods_and_nested_functions_but_not_docstrings() -> None:
    lines = [
        "class A:",
        "    def long(self):",
        *statements(8, MAX_BODY_LINES + 1),
        "    def documented(self):",
        '        """A docstring',
        *([""] * 10),
        '        """',
        *statements(8, MAX_BODY_LINES),
        "def outer():",
        "    def inner():",
        *statements(8, MAX_BODY_LINES + 1),
    ]
    found = dict(long_functions("\n".join(lines) + "\n", "m"))
    assert found == {"m:A.long": 81, "m:outer": 82, "m:outer.<locals>.inner": 81}
