"""The settings a broker's spec records: ``BrokerSettings``, setting name to a JSON value.

A spec's ``LaunchPlan.settings`` (``native_spec.py``) names what it configured that changes
benchmark results (queue limits, buffers, heap, the user, listener ports, ...). The keys
differ per broker, so they are a mapping, not a record; the values are what JSON holds
(lists for plugins and endpoints, objects for a Zenoh ``extra_config``), since the runtime
writes them into the manifest as they are (``NativeInfo.settings`` → ``cells[].broker.settings``,
docs/results.md) and ``mqbench brokers down`` reads them back from a state file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias

from mqbench.errors import BrokerError

SettingValue: TypeAlias = (
    "str | int | float | bool | Sequence[SettingValue] | Mapping[str, SettingValue] | None"
)
"""One setting's value: what ``json.dumps`` writes and ``json.loads`` gives back."""

BrokerSettings: TypeAlias = dict[str, SettingValue]
"""Setting name to value, in the order the spec recorded them (the manifest's order)."""


def int_setting(settings: Mapping[str, SettingValue], key: str) -> int | None:
    """``settings[key]`` as an integer (None when absent or null); BrokerError naming the
    key when it holds another kind of value."""
    value = settings.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BrokerError(f"broker setting {key} {value!r} is not an integer")
    return value


def str_setting(settings: Mapping[str, SettingValue], key: str) -> str | None:
    """``settings[key]`` as text (None when absent or null); BrokerError naming the key when
    it holds another kind of value."""
    value = settings.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise BrokerError(f"broker setting {key} {value!r} is not text")
    return value
