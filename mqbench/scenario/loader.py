"""Load a scenario file, apply ``--set`` overrides, validate, and explain errors in one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from mqbench.errors import ScenarioError, UsageError
from mqbench.scenario.model import Scenario
from mqbench.scenario.security import is_secret_name, redact


def parse_override(text: str) -> tuple[list[str], Any]:
    """Split ``workload.rate=[10,20]`` into a key path and a YAML-parsed value."""
    key, sep, raw = text.partition("=")
    path = [part for part in key.strip().split(".") if part]
    if not sep or not path:
        raise UsageError(f"--set {text!r}: expected KEY.PATH=VALUE, e.g. workload.pairs=20")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise UsageError(
            f"--set {text!r}: value is not valid YAML ({getattr(exc, 'problem', None) or exc})"
        ) from None
    return path, value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Return a copy of ``data`` with every ``KEY.PATH=VALUE`` override applied."""
    result: dict[str, Any] = _deep_copy(data)
    for text in overrides:
        path, value = parse_override(text)
        node = result
        for i, part in enumerate(path[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                where = ".".join(path[: i + 1])
                raise UsageError(f"--set {text!r}: {where} is not a section")
            node = child
        node[path[-1]] = value
    return result


def _deep_copy(data: dict[str, Any]) -> dict[str, Any]:
    return {k: _deep_copy(v) if isinstance(v, dict) else v for k, v in data.items()}


MAX_SCENARIO_BYTES = 16 * 1024 * 1024
"""A scenario file is a few kilobytes; anything this big is not one."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping.

    Plain YAML keeps the last value silently, so a typo'd second ``rate:`` would change
    the benchmark without a word.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key; the base class explains it
                break
            if duplicate:
                first = seen[key].start_mark.line + 1
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (first given at line {first})",
                    key_node.start_mark,
                )
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


def _decode(path: Path, raw: bytes) -> str:
    nul = raw.find(b"\x00")
    if nul >= 0:
        raise ScenarioError(f"{path}: not a scenario file (binary data: NUL byte at offset {nul})")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ScenarioError(
            f"{path}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at line {line}); "
            "save the scenario as UTF-8"
        ) from None


def read_scenario_data(path: Path) -> dict[str, Any]:
    """Read the YAML mapping of a scenario file (UTF-8 text, no key given twice)."""
    try:
        if path.is_dir():
            raise ScenarioError(f"{path}: is a folder, not a scenario file")
        if path.stat().st_size > MAX_SCENARIO_BYTES:
            raise ScenarioError(f"{path}: too big for a scenario file (> 16 MiB)")
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ScenarioError(f"{path}: no such scenario file") from None
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read ({exc.strerror})") from None
    text = _decode(path, raw)
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except RecursionError:
        raise ScenarioError(f"{path}: malformed YAML: nested too deeply") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ScenarioError(f"{path}: malformed YAML{where}: {problem}") from None
    if not isinstance(data, dict):
        raise ScenarioError(f"{path}: a scenario must be a YAML mapping, got {type(data).__name__}")
    return data


def validate_scenario(data: dict[str, Any], source: str) -> Scenario:
    """Validate ``data``; the first problem becomes a one-line ScenarioError."""
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(f"{source}: {describe_validation_error(exc)}") from None


def describe_validation_error(exc: ValidationError) -> str:
    """One line naming the key, the value and the problem (plus how many more problems)."""
    errors = exc.errors()
    first = errors[0]
    key = ".".join(str(p) for p in first["loc"] if not isinstance(p, int)) or "(top level)"
    kind = first["type"]
    if kind == "extra_forbidden":
        text = f"unknown key {key!r}"
    elif kind == "missing":
        text = f"missing required key {key!r}"
    else:
        message = first["msg"].removeprefix("Value error, ")
        value = first.get("input")
        secret = any(isinstance(p, str) and is_secret_name(p) for p in first["loc"])
        if secret or (isinstance(value, dict | list) and redact(value) != value):
            shown = ""  # never echo a secret
        elif isinstance(value, dict | list) and len(repr(value)) > 40:
            shown = ""
        else:
            shown = f" (got {value!r})"
        text = f"{key}: {message}{shown}"
    if len(errors) > 1:
        text += f" (+{len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
    return text


def load_scenario(
    path: Path, overrides: list[str] | None = None
) -> tuple[Scenario, dict[str, Any]]:
    """Load, override and validate; return the model and the raw (overridden) mapping."""
    data = apply_overrides(read_scenario_data(path), overrides or [])
    return validate_scenario(data, str(path)), data
