"""Every cell gets its own id (its folder name), and no secret reaches one."""

from __future__ import annotations

from typing import Any

import pytest

from mqbench.errors import ScenarioError
from mqbench.scenario.loader import validate_scenario
from mqbench.scenario.matrix import expand
from mqbench.scenario.security import options_label
from mqbench.workload.preflight import preflight


def _scenario(options: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "name": "ids",
        "targets": ["redis"],
        "broker": {"options": options},
        "workload": {"pairs": 1, "rate": 10, "duration": "1s", "warmup": "0s"},
    }


def test_variants_differing_only_in_a_secret_are_refused_with_a_hint_to_label_them() -> None:
    with pytest.raises(ScenarioError) as caught:
        validate_scenario(
            _scenario([{"password_env": "PW_AAA"}, {"password_env": "PW_BBB"}]), "s.yaml"
        )
    message = str(caught.value)
    assert "broker.options" in message and "entries 1 and 2" in message
    assert "no label" in message and "'label'" in message
    assert "PW_AAA" not in message and "PW_BBB" not in message


def test_variants_whose_values_join_to_one_label_are_refused() -> None:
    with pytest.raises(ScenarioError, match="the same label '2'"):
        validate_scenario(_scenario([{"io_threads": 2}, {"maxclients": 2}]), "s.yaml")


def test_labelled_secret_variants_get_distinct_ids_without_the_secret() -> None:
    scenario = validate_scenario(
        _scenario(
            [
                {"label": "weak", "password_env": "PW_AAA"},
                {"label": "strong", "password_file": "/run/pw_bbb"},
            ]
        ),
        "s.yaml",
    )
    ids = [cell.id for cell in expand(scenario)]
    assert len(set(ids)) == 2
    assert ids[0].endswith("-weak") and ids[1].endswith("-strong")
    assert not any("PW_AAA" in i or "pw_bbb" in i for i in ids)


def test_the_label_joins_non_secret_values_in_name_order() -> None:
    assert options_label({"password": "x", "maxclients": 10, "io_threads": 2}) == "2-10"
    assert options_label({"password": "x"}) is None
    assert options_label({}) is None


def test_the_preflight_refuses_two_cells_that_would_share_a_folder() -> None:
    scenario = validate_scenario(_scenario([{}]), "s.yaml")
    cell = expand(scenario)[0]
    with pytest.raises(ScenarioError, match="two cells have the id"):
        preflight(scenario, [cell, cell])
