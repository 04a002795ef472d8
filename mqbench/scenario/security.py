"""The scenario's ``security`` section: TLS and credentials, and how secrets stay out of
everything mqbench writes.

Secrets never come from the scenario text: a password is named by an environment variable
(``password_env``) or a file (``password_file``) and read just before the run
(:func:`resolve_password`). Setting names that look like secrets (``password``,
``default_pass``, ``api_token``, ...) are recognised by :func:`is_secret_name`, and
:func:`redact` replaces their values wherever settings are written (cell ids, manifests).

Broker options follow the same rule (:func:`check_secret_options`): an option that is a
secret, by its name or because the broker's definition declares it one
(``TargetDefinition.secret_options``), is given only as ``<name>_env`` or ``<name>_file``;
:func:`resolve_secret_options` reads it into a :class:`Secret`, which prints as
``<redacted>`` wherever it is written by mistake.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
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
SECRET_SOURCES: Final = ("_env", "_file")
"""A secret option ``X`` is given as ``X_env`` (an environment variable) or ``X_file``."""
ENV_NAME: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


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

    Options whose names say they are secrets (:func:`is_secret_name`), and where such a
    secret comes from (``password_env``), never appear in it.
    """
    shown = {k: v for k, v in options.items() if not is_secret_name(k) and secret_base(k) is None}
    if "label" in shown:
        return str(shown["label"])
    if not shown:
        return None
    return "-".join(str(v) for _, v in sorted(shown.items()))


def redact(value: Any) -> Any:
    """A copy of ``value`` (JSON-like data) with every secret-named key's value, and every
    :class:`Secret`, replaced."""
    if isinstance(value, Secret):
        return REDACTED
    if isinstance(value, dict):
        return {
            k: (REDACTED if isinstance(k, str) and is_secret_name(k) else redact(v))
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    return value


@dataclass(frozen=True)
class Secret:
    """A secret broker option read from an environment variable or a file.

    It prints as ``<redacted>`` (``str``, ``repr``, f-strings, JSON with ``default=str``),
    so writing it into a config file, a log or the manifest by mistake leaks nothing; the
    one place that needs the value calls :meth:`reveal` and writes it into the run's
    private folder.
    """

    value: str = field(repr=False)
    source: str
    """Where it came from, e.g. ``environment variable REDIS_PW``."""

    def __str__(self) -> str:
        return REDACTED

    def reveal(self) -> str:
        """The secret itself (for a file in the private folder only)."""
        return self.value


def secret_text(value: Any) -> str:
    """The text of an option value that may be a :class:`Secret` (revealed)."""
    return value.reveal() if isinstance(value, Secret) else str(value)


def secret_base(key: str, declared: frozenset[str] = frozenset()) -> str | None:
    """``X`` when ``key`` is ``X_env`` or ``X_file`` and ``X`` is a secret (by its name or
    ``declared``); None otherwise."""
    for suffix in SECRET_SOURCES:
        base = key.removesuffix(suffix)
        if base != key and base and (is_secret_name(base) or base in declared):
            return base
    return None


def check_secret_options(
    options: Mapping[str, Any], where: str = "", declared: frozenset[str] = frozenset()
) -> None:
    """ValueError (one line that never shows the value) for a secret option given in the
    scenario text, given twice, or pointing nowhere; nested mappings (and lists of them,
    such as ``tbmq_credentials``) are checked too. ``where`` prefixes nested keys."""
    for key, value in options.items():
        if not isinstance(key, str):
            continue
        path = f"{where}.{key}" if where else key
        base = secret_base(key, declared)
        if base is not None:
            _check_reference(options, key, base, path, value)
        elif _is_literal_secret(key, value, declared):
            raise ValueError(
                f"{path!r} is a secret and is not read from the scenario: give "
                f"{key}_env (an environment variable) or {key}_file (a file whose first "
                "line is it)"
            )
        for child in _mappings_in(value):
            check_secret_options(child, path, declared)


def _is_literal_secret(key: str, value: Any, declared: frozenset[str]) -> bool:
    """A secret option given as text (a mapping or list holds more options, not one)."""
    secret = is_secret_name(key) or key in declared
    return secret and value is not None and not isinstance(value, Mapping | list)


def _check_reference(
    options: Mapping[str, Any], key: str, base: str, path: str, value: Any
) -> None:
    from_env = key.endswith("_env")
    if not isinstance(value, str) or not (ENV_NAME.match(value) if from_env else value):
        what = "an environment variable name" if from_env else "a file path"
        raise ValueError(f"{path!r} must be {what}")
    twins = [k for k in (base, f"{base}_env", f"{base}_file") if k != key and k in options]
    if twins:
        raise ValueError(f"{path!r}: give the secret {base!r} once (also given: {twins[0]!r})")


def _mappings_in(value: Any) -> list[Mapping[str, Any]]:
    if isinstance(value, Mapping):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, Mapping)]
    return []


def resolve_secret_options(
    options: Mapping[str, Any],
    where: str = "broker.options",
    declared: frozenset[str] = frozenset(),
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """``options`` with every ``X_env``/``X_file`` of a secret ``X`` replaced by ``X``: a
    :class:`Secret` read now (nested mappings too); ScenarioError naming the key and the
    variable or file when it cannot be read."""
    env = os.environ if environ is None else environ
    out: dict[str, Any] = {}
    for key, value in options.items():
        path = f"{where}.{key}"
        base = secret_base(key, declared) if isinstance(key, str) else None
        if base is None:
            out[key] = _resolve_nested(value, path, declared, env)
        elif key.endswith("_env"):
            text = _from_env(path, str(value), env)
            out[base] = Secret(text, f"environment variable {value}")
        else:
            out[base] = Secret(_from_file(path, Path(str(value))), f"file {value}")
    return out


def _resolve_nested(value: Any, path: str, declared: frozenset[str], env: Mapping[str, str]) -> Any:
    if isinstance(value, Mapping):
        return resolve_secret_options(value, path, declared, env)
    if isinstance(value, list):
        return [_resolve_nested(v, path, declared, env) for v in value]
    return value


def has_secret_references(options: Mapping[str, Any], declared: frozenset[str]) -> bool:
    """True when ``options`` (or a mapping nested in it) gives a secret by reference."""
    for key, value in options.items():
        if isinstance(key, str) and secret_base(key, declared) is not None:
            return True
        if any(has_secret_references(m, declared) for m in _mappings_in(value)):
            return True
    return False


def _from_env(path: str, name: str, env: Mapping[str, str]) -> str:
    value = env.get(name)
    if not value:
        raise ScenarioError(f"{path}: environment variable {name} is not set (or empty)")
    return value


def _from_file(path: str, file: Path) -> str:
    """The first line of ``file``; ScenarioError naming ``path`` and the file otherwise."""
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError(f"{path}: {file}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise ScenarioError(f"{path}: {file}: cannot read ({why})") from None
    lines = text.splitlines()
    first = lines[0] if lines else ""
    if not first:
        raise ScenarioError(f"{path}: {file}: the first line is empty")
    return first


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
        password = _from_env("security.auth.password_env", auth.password_env, env)
        return Credentials(auth.username, password)
    assert auth.password_file is not None
    password = _from_file("security.auth.password_file", auth.password_file)
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
