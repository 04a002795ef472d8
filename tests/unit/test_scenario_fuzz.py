"""Scenario fuzzing: whatever a scenario file holds, mqbench answers with one line, never a
traceback, and never a resource blow-up.

Every example goes through what ``mqbench scenario validate`` does (read, parse, validate,
expand, the load pre-flight) and must either pass or raise a ``MqbenchError`` whose message
is one line, while the memory it allocates stays under ``MAX_PEAK_BYTES`` (tracemalloc) —
alias bombs included. The unit suite runs a few hundred examples per strategy; the long
mode runs ``MQBENCH_FUZZ_EXAMPLES`` (e.g. 10000) per strategy on demand, without the
suite's per-test timeout (about an hour on a loaded 2-core machine)::

    MQBENCH_FUZZ_EXAMPLES=10000 .venv/bin/pytest tests/unit/test_scenario_fuzz.py --timeout=0
"""

from __future__ import annotations

import os
import tempfile
import tracemalloc
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqbench.errors import MqbenchError
from mqbench.scenario.loader import load_scenario
from mqbench.scenario.matrix import expand
from mqbench.workload.preflight import preflight

EXAMPLES = int(os.environ.get("MQBENCH_FUZZ_EXAMPLES", "150"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
MAX_CELLS = 64
"""Examples that expand to more cells are only validated, not pre-flighted (time)."""
MAX_PEAK_BYTES = 50 * 2**20
"""Most memory one example may allocate (issue 27: an alias bomb is refused under 50 MB)."""

BASE: dict[str, Any] = {
    "name": "fuzz",
    "targets": ["nats"],
    "workload": {"pairs": 2, "rate": 10, "payload": "64B", "duration": "1s", "warmup": "0s"},
}
KEYS = {
    "": ["name", "description", "targets", "runtime", "client", "resources", "workload",
         "search", "faults", "generator", "broker", "repeat", "seed"],
    "workload": ["topology", "pairs", "subscribers", "publishers", "fanin_groups", "groups",
                 "persistent", "connect_rate", "churn", "rate", "payload", "qos", "duration",
                 "warmup", "drain"],
    "generator": ["workers", "connect_timeout", "max_send_lag_ms", "spin_ms", "reconnect_max",
                  "buffer_memory"],
    "broker": ["host", "port", "pid", "startup_timeout", "options"],
    "faults": ["type", "attributes", "stream", "toxicity", "target", "schedule", "proxy"],
    "search": ["axis", "values", "stop"],
}  # fmt: skip
WORDS = [
    "nats", "mosquitto", "redis", "pairs", "fanout", "fanin", "groups", "p2p", "auto",
    "1KiB", "64B", "5s", "1m", "500ms", "-1", "1e9", "0", "inf", "nan", "", "~", "[", "{",
]  # fmt: skip

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(WORDS),
    st.text(max_size=12),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(WORDS), st.text(max_size=6)), inner, max_size=4),
    ),
    max_leaves=12,
)


def check_one(path: Path) -> None:
    """Validate like the CLI; any failure must be a one-line MqbenchError."""
    try:
        scenario, _ = load_scenario(path)
        cells = expand(scenario)
        if len(cells) <= MAX_CELLS:
            preflight(scenario, cells)
    except MqbenchError as exc:
        message = str(exc)
        assert message and "\n" not in message, repr(message)
        assert "Traceback" not in message


def _write(data: bytes) -> Path:
    handle = tempfile.NamedTemporaryFile(suffix=".yaml", delete=False)  # noqa: SIM115
    with handle:
        handle.write(data)
    return Path(handle.name)


def _check_bytes(data: bytes) -> None:
    path = _write(data)
    tracemalloc.start()
    try:
        check_one(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        path.unlink()
    assert peak < MAX_PEAK_BYTES, f"{peak / 2**20:.0f} MB for {data[:200]!r}"


@FUZZ
@given(st.binary(max_size=512))
def test_random_bytes_never_raise_anything_but_a_one_line_error(data: bytes) -> None:
    _check_bytes(data)


@FUZZ
@given(st.text(max_size=400))
def test_random_text_never_raises_anything_but_a_one_line_error(text: str) -> None:
    _check_bytes(text.encode("utf-8", "surrogatepass"))


@st.composite
def mutated_scenarios(draw: st.DrawFn) -> dict[str, Any]:
    """The base scenario with a few known keys set to arbitrary values."""
    data: dict[str, Any] = {k: (dict(v) if isinstance(v, dict) else v) for k, v in BASE.items()}
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        section = draw(st.sampled_from(sorted(KEYS)))
        key = draw(st.sampled_from(KEYS[section]))
        value = draw(values)
        if section == "":
            data[key] = value
        else:
            node = data.get(section)
            if not isinstance(node, dict):
                node = data[section] = {}
            node[key] = value
    return data


@FUZZ
@given(mutated_scenarios())
def test_scenarios_with_arbitrary_values_never_raise_anything_but_a_one_line_error(
    data: dict[str, Any],
) -> None:
    _check_bytes(yaml.safe_dump(data, allow_unicode=True).encode("utf-8"))


@FUZZ
@given(mutated_scenarios(), st.integers(min_value=0, max_value=400), st.binary(max_size=8))
def test_corrupted_scenario_files_never_raise_anything_but_a_one_line_error(
    data: dict[str, Any], at: int, junk: bytes
) -> None:
    text = yaml.safe_dump(data, allow_unicode=True).encode("utf-8")
    at = min(at, len(text))
    _check_bytes(text[:at] + junk + text[at:])


ALIAS_PLACES = [
    "workload:\n  pairs: *{a}\n",
    "workload: {{rate: *{a}}}\n",
    "description: *{a}\n",
    "broker:\n  options: *{a}\n",
    "broker:\n  options:\n    - {{<<: *{a}}}\n",
    "generator:\n  spark_conf: *{a}\n",
    "targets: *{a}\n",
]


@st.composite
def aliased_scenarios(draw: st.DrawFn) -> str:
    """Anchors of anchors (the shape of a "billion laughs" file), used where lists,
    mappings and scalars are expected, sometimes through a merge key."""
    levels = draw(st.integers(min_value=0, max_value=14))
    width = draw(st.integers(min_value=1, max_value=12))
    leaf = draw(st.sampled_from(["[1, 2, 3]", "{k: v, n: 1}", "10", "'x'", "[nats]", "{}"]))
    lines = ["name: fuzz", "targets: [nats]", f"x0: &a0 {leaf}"]
    for level in range(1, levels + 1):
        refs = ", ".join([f"*a{level - 1}"] * width)
        body = (
            f"[{refs}]"
            if draw(st.booleans())
            else "{" + ", ".join(f"k{i}: *a{level - 1}" for i in range(width)) + "}"
        )
        lines.append(f"x{level}: &a{level} {body}")
    text = "\n".join(lines) + "\n"
    text += draw(st.sampled_from(ALIAS_PLACES)).format(a=f"a{levels}")
    return text


@FUZZ
@given(aliased_scenarios())
def test_nested_aliases_never_blow_up_and_never_raise_anything_but_a_one_line_error(
    text: str,
) -> None:
    _check_bytes(text.encode("utf-8"))
