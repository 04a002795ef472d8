"""Native resource profiles: fitting the machine, cgroup limits, thread knobs, preflight."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from cgroup_fakes import Machine, v1_machine
from typer.testing import CliRunner

from mqbench.brokers.registry import get_definition
from mqbench.brokers.resources.cgroups import CgroupManager
from mqbench.brokers.resources.knobs import (
    ErlangSchedulers,
    GoMaxProcs,
    JvmFlags,
    NoKnobs,
    jvm_profile_argv,
)
from mqbench.brokers.resources.native_profiles import (
    NativeLimiter,
    check_fits,
    check_native_profile,
    split_profile,
)
from mqbench.brokers.resources.profiles import get_profile
from mqbench.brokers.runtime.native_spec import LaunchPlan
from mqbench.cli.app import app
from mqbench.errors import BrokerError
from mqbench.scenario.model import Scenario

MIB = 1024 * 1024


@pytest.fixture
def two_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("mqbench.brokers.resources.native_profiles.machine_cpus", lambda: [0, 1])
    monkeypatch.setattr(
        "mqbench.brokers.resources.native_profiles.machine_memory_mb", lambda: 24000
    )


def fake_manager(machine: Machine) -> CgroupManager:
    return CgroupManager(machine.mountinfo, machine.self_cgroup, files=machine.kernel)


def plan(argv: list[str]) -> LaunchPlan:
    return LaunchPlan(argv=argv, config_path=None, config_text="", settings={})


def test_the_profile_option_is_taken_out_before_the_spec_sees_the_options() -> None:
    assert split_profile({"resources": "1cpu-2g", "heap": "1g"}) == ("1cpu-2g", {"heap": "1g"})
    assert split_profile({"profile": "2cpu-4g"}) == ("2cpu-4g", {})
    assert split_profile({"x": 1}) == (None, {"x": 1})
    with pytest.raises(BrokerError, match="options resources and profile disagree"):
        split_profile({"resources": "1cpu-2g", "profile": "2cpu-4g"})


def test_a_profile_with_more_cpus_than_the_machine_is_refused_with_the_reason() -> None:
    with pytest.raises(BrokerError) as excinfo:
        check_fits(get_profile("4cpu-8g"), [0, 1], 24000)
    assert str(excinfo.value) == (
        "resources profile '4cpu-8g' asks for 4 CPUs but this machine has 2 (CPUs 0-1); "
        "a quota cannot give more than there is (use 1cpu-2g or 2cpu-4g)"
    )


def test_a_profile_with_more_memory_than_the_machine_is_refused() -> None:
    with pytest.raises(BrokerError, match="asks for 8192 MiB of memory but this machine has 4000"):
        check_fits(get_profile("4cpu-8g"), [0, 1, 2, 3], 4000)
    check_fits(get_profile("unlimited"), [0], 1)


def test_an_unknown_profile_is_one_line_listing_the_known_ones() -> None:
    with pytest.raises(BrokerError) as excinfo:
        NativeLimiter.from_options({"resources": "3cpu"})
    assert str(excinfo.value) == (
        "unknown resource profile '3cpu' (known: 1cpu-2g, 2cpu-4g, 4cpu-8g, unlimited)"
    )


@pytest.mark.usefixtures("two_cpus")
def test_a_limiter_puts_the_broker_into_a_cgroup_with_the_profiles_limits(tmp_path: Path) -> None:
    machine = v1_machine(tmp_path)
    limiter, rest = NativeLimiter.from_options(
        {"resources": "1cpu-2g", "x": 1}, manager=fake_manager(machine)
    )
    assert limiter is not None and rest == {"x": 1}
    tuned = limiter.tune(GoMaxProcs(), "nats", plan(["/bin/nats-server", "-c", "n.conf"]), rest)
    argv = limiter.wrap(tuned.argv, "nats-4222")
    assert argv[:2] == ["/bin/sh", "-c"]
    assert argv[-5:] == ["/usr/bin/env", "GOMAXPROCS=1", "/bin/nats-server", "-c", "n.conf"]
    facts = limiter.describe()
    assert facts["profile"] == "1cpu-2g"
    assert facts["knobs"] == {"GOMAXPROCS": 1}
    cgroup = facts["cgroup"]
    assert (cgroup["cpu_quota_us"], cgroup["cpuset_cpus"]) == (100000, "0")
    assert cgroup["memory_limit_bytes"] == 2048 * MIB
    assert Path(cgroup["paths"]["cpu"]).name.startswith("nats-4222-")
    limiter.release()
    assert all(not Path(p).exists() for p in cgroup["paths"].values())
    assert limiter.describe()["cgroup"]["removed"] is True


@pytest.mark.usefixtures("two_cpus")
def test_the_unlimited_profile_creates_no_cgroup_and_sets_no_knob(tmp_path: Path) -> None:
    machine = v1_machine(tmp_path)
    limiter, _ = NativeLimiter.from_options({"resources": "unlimited"}, fake_manager(machine))
    assert limiter is not None
    argv = ["/bin/nats-server"]
    assert limiter.wrap(limiter.tune(GoMaxProcs(), "nats", plan(argv), {}).argv, "nats") == argv
    assert limiter.describe() == {
        "profile": "unlimited",
        "cpus": None,
        "mem_mb": None,
        "cgroup": None,
        "knobs": {},
    }
    assert not (machine.roots["cpu"] / "mqbench").exists()


@pytest.mark.usefixtures("two_cpus")
def test_no_cgroup_write_access_is_an_error_never_an_unlimited_run(tmp_path: Path) -> None:
    machine = v1_machine(tmp_path)
    machine.kernel.fail_mkdir = errno.EACCES
    limiter, _ = NativeLimiter.from_options({"resources": "2cpu-4g"}, fake_manager(machine))
    assert limiter is not None
    with pytest.raises(BrokerError, match=r"cannot create cgroup .*Permission denied"):
        limiter.wrap(["/bin/true"], "x")
    with pytest.raises(BrokerError, match="native resource profiles need write access"):
        check_native_profile("2cpu-4g", fake_manager(machine))


def test_jvm_flags_replace_the_heap_and_set_the_processor_count() -> None:
    argv, knobs = jvm_profile_argv(
        ["/usr/bin/java", "-Xms64m", "-Xmx512m", "-Dx=1", "-jar", "a.jar", "start"],
        get_profile("1cpu-2g"),
    )
    assert argv == [
        "/usr/bin/java",
        "-XX:ActiveProcessorCount=1",
        "-Xms1024m",
        "-Xmx1024m",
        "-Dx=1",
        "-jar",
        "a.jar",
        "start",
    ]
    assert knobs["heap_max"] == "1024m" and knobs["active_processor_count"] == 1


def test_a_heap_option_together_with_a_profile_is_refused_naming_both() -> None:
    knobs = get_definition("activemq").knobs
    assert knobs == JvmFlags()
    with pytest.raises(BrokerError) as excinfo:
        knobs.tune("activemq", plan(["/usr/bin/java"]), get_profile("2cpu-4g"), {"heap": "3g"})
    assert str(excinfo.value) == (
        "activemq option heap='3g' conflicts with resources profile '2cpu-4g' "
        "(heap 2048m, half its memory limit); drop one"
    )


def test_rabbitmq_gets_one_scheduler_per_profile_cpu() -> None:
    argv = ["/usr/bin/env", "HOME=/w", "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel x", "/rmq"]
    rabbit = get_definition("rabbitmq-mqtt").knobs
    assert rabbit == get_definition("rabbitmq-amqp").knobs == ErlangSchedulers()
    tuned, knobs = rabbit.tune("rabbitmq-mqtt", plan(argv), get_profile("2cpu-4g"), {})
    assert tuned.argv[2] == "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel x +S 2:2"
    assert knobs == {"erl_flags": "+S 2:2"}


def test_single_threaded_brokers_get_no_knob() -> None:
    original = plan(["/usr/sbin/mosquitto", "-c", "m.conf"])
    mosquitto = get_definition("mosquitto").knobs
    assert mosquitto == NoKnobs()
    tuned, knobs = mosquitto.tune("mosquitto", original, get_profile("1cpu-2g"), {})
    assert (tuned, knobs) == (original, {})


def test_resources_with_the_external_runtime_are_refused_but_native_accepts_them() -> None:
    base = {"name": "r", "targets": ["mosquitto"], "resources": ["1cpu-2g"]}
    assert Scenario.model_validate({**base, "runtime": "native"}).resources == ["1cpu-2g"]
    with pytest.raises(ValueError, match="runtime 'external' cannot apply them"):
        Scenario.model_validate({**base, "runtime": "external", "broker": {"port": 1883}})


def test_run_refuses_a_profile_larger_than_the_machine_before_creating_results(
    tmp_path: Path, two_cpus: None
) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: big\ntargets: [mosquitto]\nresources: [1cpu-2g, 4cpu-8g]\n")
    out = tmp_path / "results"
    result = CliRunner().invoke(app, ["run", str(scenario), "--out", str(out)])
    assert result.exit_code == 1
    assert result.output.startswith(
        f"error: {scenario}: resources profile '4cpu-8g' asks for 4 CPUs but this machine has 2"
    )
    assert "Traceback" not in result.output
    assert not (out / "big").exists()


def test_run_without_cgroup_access_fails_in_one_line_before_creating_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, two_cpus: None
) -> None:
    machine = v1_machine(tmp_path)
    machine.kernel.fail_mkdir = errno.EACCES
    monkeypatch.setattr(
        "mqbench.brokers.resources.native_profiles.CgroupManager", lambda: fake_manager(machine)
    )
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: nocg\ntargets: [mosquitto]\nresources: 1cpu-2g\n")
    out = tmp_path / "results"
    result = CliRunner().invoke(app, ["run", str(scenario), "--out", str(out)])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"error: {scenario}: cannot create cgroup ")
    assert "native resource profiles need write access" in lines[0]
    assert not (out / "nocg").exists()


def test_run_with_an_unknown_profile_is_one_line_before_creating_results(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: unk\ntargets: [mosquitto]\nresources: 3cpu\n")
    out = tmp_path / "results"
    result = CliRunner().invoke(app, ["run", str(scenario), "--out", str(out)])
    assert result.exit_code == 1
    assert result.output.strip() == (
        f"error: {scenario}: unknown resources profile '3cpu' (known: 1cpu-2g, 2cpu-4g, "
        "4cpu-8g, unlimited)"
    )
    assert not (out / "unk").exists()
