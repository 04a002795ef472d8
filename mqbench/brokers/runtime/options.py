"""A broker's options (``broker.options``) as one typed, frozen pydantic model per broker.

Each native spec names its model (``NativeSpec.options_model``); a field's default is the
value mqbench writes when the scenario gives none, and its description says what it sets.
``mqbench brokers options`` shows them, and docs/brokers.md's options table is that
command's output (``tests/unit/test_broker_options.py`` compares them).
:func:`parse_options` is where options enter a spec: at pre-flight
(``NativeSpec.check_options``) and again when the config is written. An unknown or
mistyped option is a ``BrokerError`` in one line naming the key and value; a model's own
validator may raise a ``BrokerError`` with its own line, which passes through unchanged.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from mqbench.errors import BrokerError, names_in_one_line

SHOWN_VALUE_CHARS = 60
"""How much of a rejected value an error line shows (an ``extra_config`` can be long)."""


class BrokerOptionsModel(BaseModel):
    """Base of every broker's options model: unknown keys refused, values immutable.

    Numbers given where a string is expected (``disk_free_limit: 50000000``) are taken as
    their text, as the untyped options were; a ``Secret`` (a secret option read from
    ``<name>_env``/``<name>_file``) is an accepted value where a field's type names it.
    """

    model_config = ConfigDict(
        extra="forbid", frozen=True, coerce_numbers_to_str=True, arbitrary_types_allowed=True
    )

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """Every option with its default, by name (what a scenario gets when it sets none)."""
        return cls().model_dump()


class NoOptions(BrokerOptionsModel):
    """A broker that takes no options."""


ModelT = TypeVar("ModelT", bound=BrokerOptionsModel)


def _shown(value: object) -> str:
    """``repr(value)`` cut to :data:`SHOWN_VALUE_CHARS` (repr keeps it one line)."""
    text = repr(value)
    return text if len(text) <= SHOWN_VALUE_CHARS else text[: SHOWN_VALUE_CHARS - 3] + "..."


def parse_options(broker: str, model: type[ModelT], options: Mapping[str, Any]) -> ModelT:
    """``options`` as ``model``; ``BrokerError`` in one line on an unknown or mistyped key.

    Unknown keys: ``unknown <broker> option(s) a, b (known: ...)``. A wrong value:
    ``<broker> option <key>=<value>: <what was expected> (<key>: <its description>)``.
    """
    unknown = sorted(set(options) - set(model.model_fields))
    if unknown:
        raise BrokerError(
            f"unknown {broker} option(s) {names_in_one_line(unknown)} "
            f"(known: {', '.join(sorted(model.model_fields))})"
        )
    try:
        return model.model_validate(dict(options))
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        key = str(first["loc"][0]) if first["loc"] else "?"
        message = str(first["msg"])
        message = message[:1].lower() + message[1:]
        field = model.model_fields.get(key)
        if field is not None and field.description:
            message += f" ({key}: {field.description})"
        raise BrokerError(
            f"{broker} option {names_in_one_line([key])}={_shown(options.get(key))}: {message}"
        ) from None


@dataclass(frozen=True)
class OptionDoc:
    """One option as the reference table shows it (``mqbench brokers options``)."""

    name: str
    type: str
    default: str
    description: str


def _type_name(annotation: object) -> str:
    """``int``, ``str | None``, ``Secret | str``, ``'a' | 'b'``, ``mapping``: a field's type
    for people."""
    if annotation is None or annotation is type(None):
        return "None"
    if typing.get_origin(annotation) is typing.Literal:
        return " | ".join(repr(arg) for arg in typing.get_args(annotation))
    if typing.get_origin(annotation) is typing.Annotated:
        return _type_name(typing.get_args(annotation)[0])
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return " | ".join(_type_name(arg) for arg in typing.get_args(annotation))
    if typing.get_origin(annotation) is dict:
        return "mapping"
    return getattr(annotation, "__name__", str(annotation))


def _yaml_value(value: object) -> str:
    """A default as a scenario would write it: ``null``, ``true``, ``'text'``, ``10``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value) if isinstance(value, str) else str(value)


def option_docs(model: type[BrokerOptionsModel]) -> list[OptionDoc]:
    """Every option of ``model`` in declaration order: type, default and description."""
    return [
        OptionDoc(
            name,
            _type_name(field.annotation),
            _yaml_value(field.get_default(call_default_factory=True)),
            field.description or "",
        )
        for name, field in model.model_fields.items()
    ]


def by_model(
    targets: Iterable[tuple[str, type[BrokerOptionsModel]]],
) -> list[tuple[str, type[BrokerOptionsModel]]]:
    """``(target, model)`` pairs grouped by model: ``("rabbitmq-mqtt, rabbitmq-amqp", m)``."""
    grouped: dict[type[BrokerOptionsModel], list[str]] = {}
    for target, model in targets:
        grouped.setdefault(model, []).append(target)
    return [(", ".join(names), model) for model, names in grouped.items()]


def options_markdown(targets: Iterable[tuple[str, type[BrokerOptionsModel]]]) -> str:
    """The options reference of docs/brokers.md from ``(target, model)`` pairs: one row per
    option, under the targets that share a model (RabbitMQ's two)."""
    lines = ["| targets | option | type | default | what it sets |", "|---|---|---|---|---|"]
    for names, model in by_model(targets):
        for row in option_docs(model):
            cells = (names, f"`{row.name}`", row.type, f"`{row.default}`", row.description)
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"
