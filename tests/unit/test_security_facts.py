"""A run's security facts are one typed value (``workload.security.SecurityFacts``) whose
manifest entry keeps the keys, and their order, that manifests have always had."""

from __future__ import annotations

import json

from mqbench.workload.security import PLAIN, SecurityFacts


def test_a_plain_run_records_only_that_tls_and_auth_were_off() -> None:
    assert json.dumps(PLAIN.describe()) == '{"tls": false, "auth": false}'


def test_a_secured_run_records_user_certificates_and_client_certificates_in_order() -> None:
    facts = SecurityFacts(
        tls=True,
        auth=True,
        username="u",
        certificates={"generated": True},
        client_certificate_required=False,
    )
    assert list(facts.describe()) == [
        "tls",
        "auth",
        "username",
        "certificates",
        "client_certificate_required",
    ]


def test_an_external_broker_without_tls_records_no_certificates_and_no_client_rule() -> None:
    facts = SecurityFacts(tls=False, auth=True, username="u")
    assert facts.describe() == {"tls": False, "auth": True, "username": "u"}


def test_the_recorded_certificates_are_a_copy() -> None:
    certificates = {"generated": False}
    described = SecurityFacts(tls=True, auth=False, certificates=certificates).describe()
    described["certificates"]["generated"] = True
    assert certificates == {"generated": False}
