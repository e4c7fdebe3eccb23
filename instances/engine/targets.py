"""Named targets of the Dapr-style task types: the services (`DaprService`, 3), HTTP endpoints
(`DaprHttpEndpoint`, 1) and output bindings (`DaprBinding`, 2) a definition names, configured in
settings (`VNEXT["SERVICES"]`, `["HTTP_ENDPOINTS"]`, `["BINDINGS"]`). A definition carries only
the name: URLs, headers with tokens, mail passwords live in settings.

A binding is of a kind: `webhook` (an HTTP call through the egress policy, in the engine) or
`smtp` (a mail, sent by the `BindingSender` an adapter outside the engine installs). An entry
of any other kind, or one missing what its kind needs, is a problem: the process refuses to
boot with it, and a task naming it is refused at publish.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from instances.engine.ports import BindingSender

DEFAULT_TIMEOUT_SECONDS = 30.0

# What each binding kind does with a task's `operation` (the HTTP method, for a webhook).
WEBHOOK_OPERATIONS = {
    "create": "POST",
    "post": "POST",
    "get": "GET",
    "put": "PUT",
    "patch": "PATCH",
    "delete": "DELETE",
}
BINDING_OPERATIONS: dict[str, frozenset[str]] = {
    "webhook": frozenset(WEBHOOK_OPERATIONS),
    "smtp": frozenset({"create"}),
}

# The settings each kind of named target is read from.
SERVICES_SETTING = "SERVICES"
ENDPOINTS_SETTING = "HTTP_ENDPOINTS"
BINDINGS_SETTING = "BINDINGS"


@dataclass(frozen=True)
class HttpTarget:
    """A named HTTP base (a service or an endpoint): its URL, the headers every call to it
    carries (credentials), its timeout and whether its certificate is verified."""

    name: str
    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout: float | None = None
    verify: bool = True


@dataclass(frozen=True)
class BindingTarget:
    """A named output binding: its kind and its settings entry (the adapter's options)."""

    name: str
    kind: str
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def timeout(self) -> float:
        """The binding's timeout in seconds (`timeout` in its entry, else 30)."""
        return float(self.options.get("timeout") or DEFAULT_TIMEOUT_SECONDS)


@dataclass(frozen=True)
class NamedTargets:
    """Every named target from settings, and what is wrong with the entries that cannot be used
    (by setting and name: `("BINDINGS", "archive") -> "... kind 's3' ..."`)."""

    services: Mapping[str, HttpTarget] = field(default_factory=dict)
    endpoints: Mapping[str, HttpTarget] = field(default_factory=dict)
    bindings: Mapping[str, BindingTarget] = field(default_factory=dict)
    problems: Mapping[tuple[str, str], str] = field(default_factory=dict)

    @classmethod
    def from_settings(cls, services: Any, endpoints: Any, bindings: Any) -> NamedTargets:
        """The targets of the three settings (each a dict of name -> entry); an entry that
        cannot be used is left out and its problem recorded."""
        problems: dict[tuple[str, str], str] = {}
        parsed_services = _http_targets(SERVICES_SETTING, services, problems)
        parsed_endpoints = _http_targets(ENDPOINTS_SETTING, endpoints, problems)
        parsed_bindings: dict[str, BindingTarget] = {}
        for name, entry in _entries(BINDINGS_SETTING, bindings, problems):
            problem = _binding_problem(name, entry)
            if problem is None:
                parsed_bindings[name] = BindingTarget(name, str(entry["kind"]), dict(entry))
            else:
                problems[(BINDINGS_SETTING, name)] = problem
        return cls(parsed_services, parsed_endpoints, parsed_bindings, problems)

    def problem(self, setting: str, name: str) -> str | None:
        """Why the entry `name` of `setting` cannot be used, or None."""
        return self.problems.get((setting, name))


def _entries(
    setting: str, value: Any, problems: dict[tuple[str, str], str]
) -> list[tuple[str, Mapping[str, Any]]]:
    if not value:
        return []
    if not isinstance(value, Mapping):
        problems[(setting, "")] = f"VNEXT[{setting!r}] must map names to entries"
        return []
    entries = []
    for name, entry in value.items():
        if isinstance(entry, Mapping):
            entries.append((str(name), entry))
        else:
            problems[(setting, str(name))] = f"VNEXT[{setting!r}][{name!r}] must be an object"
    return entries


def _http_targets(
    setting: str, value: Any, problems: dict[tuple[str, str], str]
) -> dict[str, HttpTarget]:
    targets = {}
    for name, entry in _entries(setting, value, problems):
        url = str(entry.get("url") or "")
        headers = entry.get("headers") or {}
        if not url.startswith(("http://", "https://")):
            problems[(setting, name)] = (
                f"VNEXT[{setting!r}][{name!r}] needs a `url` (http:// or https://)"
            )
        elif not isinstance(headers, Mapping):
            problems[(setting, name)] = f"VNEXT[{setting!r}][{name!r}]: `headers` must be an object"
        else:
            timeout = entry.get("timeout")
            targets[name] = HttpTarget(
                name=name,
                url=url,
                headers={str(k): str(v) for k, v in headers.items()},
                timeout=float(timeout) if timeout else None,
                verify=entry.get("verify", True) is not False,
            )
    return targets


def _binding_problem(name: str, entry: Mapping[str, Any]) -> str | None:
    where = f"VNEXT[{BINDINGS_SETTING!r}][{name!r}]"
    kind = entry.get("kind")
    if kind not in BINDING_OPERATIONS:
        kinds = ", ".join(sorted(BINDING_OPERATIONS))
        return (
            f"{where} is of kind {kind!r}, which this runtime does not provide "
            f"(binding kinds: {kinds})"
        )
    if kind == "webhook" and not str(entry.get("url") or "").startswith(("http://", "https://")):
        return f"{where} (webhook) needs a `url` (http:// or https://)"
    if kind == "smtp":
        if not entry.get("host"):
            return f"{where} (smtp) needs a `host`"
        port = entry.get("port", 25)
        if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
            return f"{where} (smtp): `port` must be a port number, not {port!r}"
    return None


_targets_source: Callable[[], NamedTargets] = NamedTargets
_senders: dict[str, BindingSender] = {}


def configure_targets(source: Callable[[], NamedTargets]) -> None:
    """Where the named targets come from (the settings, read at every call); until configured,
    none."""
    global _targets_source
    _targets_source = source


def named_targets() -> NamedTargets:
    """The named targets in force now."""
    return _targets_source()


def install_binding_sender(kind: str, sender: BindingSender | None) -> None:
    """The adapter that sends through bindings of `kind` (`smtp`); None removes it."""
    if sender is None:
        _senders.pop(kind, None)
    else:
        _senders[kind] = sender


def binding_sender(kind: str) -> BindingSender | None:
    """The adapter installed for bindings of `kind`, or None."""
    return _senders.get(kind)
