"""Load a scenario file, apply ``--set`` overrides, validate, and explain errors in one line."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from mqbench.errors import ScenarioError, UsageError
from mqbench.scenario.model import Scenario
from mqbench.scenario.security import REDACTED, is_secret_name, redact

KEY_PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]*$")
"""One part of a ``--set`` key path: a scenario key (letters, digits, ``_``, ``-``)."""


def parse_override(text: str) -> tuple[list[str], Any]:
    """Split ``workload.rate=[10,20]`` into a key path and a YAML-parsed value.

    Every part of the path must be a key (``a..b``, ``.a`` or ``a b`` are refused), and the
    value is read with the same bounds as a scenario file (:func:`load_yaml`).
    """
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise UsageError(f"--set {text!r}: expected KEY.PATH=VALUE, e.g. workload.pairs=20")
    path = key.strip().split(".")
    for part in path:
        if not KEY_PART.match(part):
            shown = "an empty key" if not part else f"{part!r} is not a key"
            raise UsageError(
                f"--set {redact_override(text)!r}: {shown} in {key.strip()!r} "
                "(KEY.PATH is keys joined by dots, e.g. workload.pairs)"
            )
    if not raw.strip():
        return path, ""
    try:
        value = load_yaml(raw)
    except YamlRefused as exc:
        raise UsageError(f"--set {redact_override(text)!r}: value {exc}") from None
    return path, value


def redact_override(text: str) -> str:
    """``KEY.PATH=VALUE`` with the value of a secret-named key (or any secret inside a
    mapping value) replaced: fit for messages and the manifest's ``command_line``."""
    key, sep, raw = text.partition("=")
    if not sep:
        return text
    last = key.rsplit(".", 1)[-1].lstrip("-")
    if is_secret_name(last):
        return f"{key}={REDACTED}"
    if not any(ch in raw for ch in "{[:"):
        return text  # a plain scalar cannot hold a secret-named key
    try:
        value = load_yaml(raw)
    except YamlRefused:
        return f"{key}={REDACTED}"  # unreadable: it cannot be checked, so it is not shown
    hidden = redact(value)
    if hidden == value:
        return text
    return f"{key}=" + yaml.safe_dump(hidden, default_flow_style=True, width=1 << 20).strip()


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
                raise UsageError(f"--set {redact_override(text)!r}: {where} is not a section")
            node = child
        node[path[-1]] = value
    return result


def _deep_copy(data: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _deep_copy(v) if isinstance(v, Mapping) else v for k, v in data.items()}


@dataclass(frozen=True)
class ScenarioSource:
    """The scenario as its user gave it: where (``file``: the path, or a label such as
    ``mqbench calibrate``) and what (``document``: the YAML mapping with ``--set``
    applied, before validation).

    The engine runs the validated :class:`Scenario`; this is kept only so the manifest can
    say what was asked, in the user's own words (``scenario_file`` and, secrets redacted,
    ``scenario_input``: :meth:`stored_input`). ``document`` is a private copy.
    """

    file: str
    document: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "document", _deep_copy(self.document))

    def stored_input(self) -> dict[str, Any]:
        """The manifest's ``scenario_input``: the document with every secret redacted."""
        stored: dict[str, Any] = redact(_deep_copy(self.document))
        return stored


MAX_SCENARIO_BYTES = 1024 * 1024
"""A scenario file is a few kilobytes; anything this big is not one."""
MAX_YAML_NODES = 100_000
"""Most values (scalars, lists, mappings) a scenario may hold, counted with every alias
expanded: a few hundred-byte "billion laughs" file would otherwise expand to gigabytes
when the scenario is validated. The largest shipped scenario holds a few hundred."""
MERGE_TAG = "tag:yaml.org,2002:merge"


class YamlRefused(Exception):
    """YAML text that is malformed or too big; the message is one line without a path."""


class _BoundedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses what a scenario never needs and an attacker would use.

    - A key given twice in one mapping: plain YAML keeps the last value silently, so a
      typo'd second ``rate:`` would change the benchmark without a word.
    - Merge keys (``<<:``): they override keys implicitly, which the rule above exists to
      prevent; the message says so and how to write the keys out.
    - More than ``MAX_YAML_NODES`` values, counted while the text is composed and again with
      aliases expanded (:func:`expanded_size`), before any value is built.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._composed = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        self._composed += 1
        if self._composed > MAX_YAML_NODES:
            mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
            raise YamlRefused(
                f"more than {MAX_YAML_NODES:,} values (at line {mark.line + 1}); "
                "a scenario holds a few hundred"
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == MERGE_TAG:
                line = key_node.start_mark.line + 1
                raise YamlRefused(
                    f"a YAML merge key ('<<') at line {line}: merge keys are not supported "
                    "(they override keys silently); write the keys out, or repeat a whole "
                    "value with an anchor (&name) and an alias (*name)"
                )
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


def expanded_size(root: yaml.Node, limit: int = MAX_YAML_NODES) -> int:
    """How many values ``root`` stands for with every alias expanded (stops past ``limit``).

    Aliased nodes are shared objects in the composed graph, so sizes are memoised by node
    identity: the walk is linear in the distinct nodes however deep the aliases nest.
    """
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes:
            continue
        children = _children(node)
        if children_done or not children:
            total = 1 + sum(sizes.get(id(c), 0) for c in children)
            sizes[id(node)] = min(total, limit + 1)
            continue
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in sizes)
    return sizes[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def load_yaml(text: str) -> Any:
    """Parse one YAML document within the bounds of :class:`_BoundedLoader`.

    Raises :class:`YamlRefused` with one line (no path) when the text is malformed, nests
    too deeply, or holds more than ``MAX_YAML_NODES`` values once aliases are expanded.
    """
    loader: _BoundedLoader | None = None
    try:
        loader = _BoundedLoader(text)  # checks for unprintable characters: may raise
        node = loader.get_single_node()
        if node is None:
            return None
        size = expanded_size(node)
        if size > MAX_YAML_NODES:
            raise YamlRefused(
                f"more than {MAX_YAML_NODES:,} values once its aliases are expanded "
                "(an alias bomb?); a scenario holds a few hundred"
            )
        return loader.construct_document(node)
    except RecursionError:
        raise YamlRefused("malformed YAML: nested too deeply") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise YamlRefused(f"malformed YAML{where}: {problem}") from None
    except (ValueError, OverflowError) as exc:
        # PyYAML lets some malformed text through as plain Python errors instead of a
        # YAMLError: a "\U" escape past U+10FFFF fails in chr(), an impossible date in
        # date(). Found by the 10,000-example fuzz run.
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise YamlRefused(f"malformed YAML: a value that cannot be read ({detail})") from None
    finally:
        if loader is not None:
            loader.dispose()


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
    """Read the YAML mapping of a scenario file (UTF-8 text within the loader's bounds)."""
    try:
        if path.is_dir():
            raise ScenarioError(f"{path}: is a folder, not a scenario file")
        with path.open("rb") as handle:
            raw = handle.read(MAX_SCENARIO_BYTES + 1)
    except FileNotFoundError:
        raise ScenarioError(f"{path}: no such scenario file") from None
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read ({exc.strerror})") from None
    if len(raw) > MAX_SCENARIO_BYTES:
        raise ScenarioError(f"{path}: too big for a scenario file (> 1 MiB)")
    text = _decode(path, raw)
    try:
        data = load_yaml(text)
    except YamlRefused as exc:
        raise ScenarioError(f"{path}: {exc}") from None
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
) -> tuple[Scenario, ScenarioSource]:
    """Load, override and validate; return the model and the scenario as given (the
    overridden mapping)."""
    data = apply_overrides(read_scenario_data(path), overrides or [])
    return validate_scenario(data, str(path)), ScenarioSource(str(path), data)
