"""The scenario's ``security`` section: TLS and credentials, and how secrets stay out of
everything mqbench writes.

Secrets never come from the scenario text: a password is named by an environment variable
(``password_env``) or a file (``password_file``) and read just before the run
(:func:`resolve_password`). Setting names that look like secrets (``password``,
``default_pass``, ``api_token``, ...) are recognised by :func:`is_secret_name`, and
:func:`redact` replaces their values wherever settings are written (cell ids, manifests).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, model_validator

from mqbench.errors import ScenarioError

REDACTED: Final = "<redacted>"
"""What a secret's value is replaced with."""

SECRET_WORDS: Final = frozenset(
    {
        "password",
        "passwd",
        "pass",
        "pwd",
        "secret",
        "token",
        "credential",
        "credentials",
        "key",
        "apikey",
        "passphrase",
        "private",
    }
)
"""Words that make a setting name a secret (as one ``_``/``-``/``.``-separated part, or a
name ending in one of them, e.g. ``requirepass``, ``apikey``)."""

REFERENCE_SUFFIXES: Final = ("_env", "_file", "_path", "_dir")
"""Names ending like this point at a secret (``password_env``); their values are not one."""


def is_secret_name(name: str) -> bool:
    """True when a setting called ``name`` holds a secret (its value must not be written)."""
    lowered = name.lower()
    if lowered.endswith(REFERENCE_SUFFIXES):
        return False
    parts = [p for p in re.split(r"[_\-.\s]+", lowered) if p]
    if any(p in SECRET_WORDS for p in parts):
        return True
    return any(lowered.endswith(word) for word in ("password", "pass", "secret", "token"))


def options_label(options: dict[str, Any]) -> str | None:
    """A ``broker.options`` variant's label for cell ids: ``label`` or the values joined.

    Options whose names say they are secrets (:func:`is_secret_name`) never appear in it.
    """
    shown = {k: v for k, v in options.items() if not is_secret_name(k)}
    if "label" in shown:
        return str(shown["label"])
    if not shown:
        return None
    return "-".join(str(v) for _, v in sorted(shown.items()))


def redact(value: Any) -> Any:
    """A copy of ``value`` (JSON-like data) with every secret-named key's value replaced."""
    if isinstance(value, dict):
        return {
            k: (REDACTED if isinstance(k, str) and is_secret_name(k) else redact(v))
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Auth(_Strict):
    """A user name and where its password comes from (an env variable or a file)."""

    username: str = Field(min_length=1, max_length=200, pattern=r"^[^\s:\x00]+$")
    password_env: str | None = Field(
        default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="env variable name"
    )
    password_file: Path | None = Field(
        default=None, strict=False, description="file whose first line is the password"
    )

    @model_validator(mode="before")
    @classmethod
    def _no_literal_secret(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key in data:
                if isinstance(key, str) and is_secret_name(key):
                    raise ValueError(
                        f"'{key}' is not read from the scenario: secrets come only from "
                        "password_env (an environment variable) or password_file"
                    )
        return data

    @model_validator(mode="after")
    def _one_source(self) -> Auth:
        if (self.password_env is None) == (self.password_file is None):
            raise ValueError("give exactly one of password_env or password_file")
        return self


class Security(_Strict):
    """TLS and authentication for every client and (for brokers mqbench starts) the broker.

    With ``tls: true`` and a broker mqbench starts, a throwaway CA and server certificate
    are generated per run; for an external broker, ``ca_file`` names the CA that signed the
    broker's certificate. ``cert_file``/``key_file`` (external) or ``client_cert: true``
    (brokers mqbench starts) add a client certificate the broker verifies.
    """

    tls: bool = False
    auth: Auth | None = None
    client_cert: bool = Field(
        default=False, description="brokers mqbench starts: require a client certificate"
    )
    ca_file: Path | None = Field(
        default=None, strict=False, description="external broker: CA certificate"
    )
    cert_file: Path | None = Field(
        default=None, strict=False, description="external broker: client cert"
    )
    key_file: Path | None = Field(
        default=None, strict=False, description="external broker: client key"
    )
    server_name: str | None = Field(
        default=None, description="external broker: the name its certificate carries"
    )

    @model_validator(mode="after")
    def _consistent(self) -> Security:
        files = {"ca_file": self.ca_file, "cert_file": self.cert_file, "key_file": self.key_file}
        given = [k for k, v in files.items() if v is not None]
        if not self.tls and (given or self.client_cert or self.server_name):
            what = ", ".join(given + (["client_cert"] if self.client_cert else []))
            raise ValueError(f"{what or 'server_name'} needs tls: true")
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together (the client certificate)")
        return self

    @property
    def enabled(self) -> bool:
        """True when TLS or authentication is on."""
        return self.tls or self.auth is not None


@dataclass(frozen=True)
class Credentials:
    """A user name and its password, read from where the scenario says (never written)."""

    username: str
    password: str = field(repr=False)


def resolve_password(auth: Auth, environ: dict[str, str] | None = None) -> Credentials:
    """Read ``auth``'s password; ``ScenarioError`` naming the variable or file when missing."""
    env = os.environ if environ is None else environ
    if auth.password_env is not None:
        value = env.get(auth.password_env)
        if not value:
            raise ScenarioError(
                f"security.auth.password_env: environment variable {auth.password_env} "
                "is not set (or empty)"
            )
        return Credentials(auth.username, value)
    assert auth.password_file is not None
    path = auth.password_file
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError(f"security.auth.password_file: {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise ScenarioError(f"security.auth.password_file: {path}: cannot read ({why})") from None
    lines = text.splitlines()
    password = lines[0] if lines else ""
    if not password:
        raise ScenarioError(f"security.auth.password_file: {path}: the first line is empty")
    return Credentials(auth.username, password)


def check_security_files(security: Security) -> None:
    """``ScenarioError`` naming a CA/certificate/key file that cannot be read."""
    for name in ("ca_file", "cert_file", "key_file"):
        path: Path | None = getattr(security, name)
        if path is None:
            continue
        try:
            with path.open("rb"):
                pass
        except OSError as exc:
            raise ScenarioError(
                f"security.{name}: {path}: cannot read ({exc.strerror or exc})"
            ) from None


def redact_argv(argv: list[str]) -> list[str]:
    """``argv`` with every secret in a ``KEY.PATH=VALUE`` replaced: a secret-named last key
    (``--set broker.options.password=...``) or a secret-named key inside a YAML mapping
    value (``--set 'broker.options={password: ...}'``), also as ``--set=KEY.PATH=VALUE``."""
    from mqbench.scenario.loader import redact_override  # the loader imports this module

    out: list[str] = []
    for arg in argv:
        if arg.startswith("--") and "=" in arg:
            flag, _, rest = arg.partition("=")
            out.append(f"{flag}={redact_override(rest)}" if "=" in rest else arg)
        else:
            out.append(redact_override(arg))
    return out
