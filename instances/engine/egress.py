"""The egress policy: which addresses the platform's outgoing HTTP calls (HTTP tasks, remote
domains, notification webhooks) may connect to. By default only globally routable unicast
addresses: loopback, private, link-local, shared, unspecified, multicast and reserved ones are
refused, IPv4 embedded in IPv6 (`::ffff:127.0.0.1`, NAT64, 6to4, Teredo) judged by its IPv4
part; operators allow more by host (`mock.internal`, `localhost:3001`, `*.corp.example`) or by
CIDR (`10.20.0.0/16`).

The check is made where the connection is opened (`EgressTransport`'s network backend), never
before: the host is resolved once, every A/AAAA answer vetted, and the socket opened to a vetted
address, so a name cannot answer a public address to a check and a private one to the connect
(DNS rebinding). Every redirect hop, like every new connection, is vetted again. Numeric
spellings (`2130706433`, `0x7f.1`, `127.1`) resolve to what they mean and are judged so.
"""

from __future__ import annotations

import functools
import ipaddress
import os
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any

import httpcore
import httpx

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
# NAT64's well-known prefix: the last 32 bits are the IPv4 address reached.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


class EgressRefused(Exception):
    """An outgoing call to an address the egress policy does not allow (never connected)."""

    def __init__(self, host: str, port: int, address: str, reason: str) -> None:
        self.host, self.port, self.address, self.reason = host, port, address, reason
        shown = host if host == address else f"{host} ({address})"
        super().__init__(
            f"egress to {shown}:{port} refused: {reason} "
            "(allow it with VNEXT_EGRESS_ALLOW_HOSTS or VNEXT_EGRESS_ALLOW_CIDRS)"
        )


def _embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries (mapped, NAT64, 6to4, Teredo client), if any."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    return None


def non_public_reason(address: IPAddress) -> str | None:
    """Why `address` is not a public unicast address (`loopback`, `private`, ...), or None."""
    embedded = _embedded_ipv4(address)
    if embedded is not None:
        reason = non_public_reason(embedded)
        return f"{reason} (IPv4 {embedded} inside IPv6)" if reason else None
    checks = (
        ("unspecified", address.is_unspecified),
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("private", address.is_private),
        ("reserved", address.is_reserved),
        ("not globally routable", not address.is_global),
    )
    return next((name for name, holds in checks if holds), None)


def _host_name(host: str) -> str:
    return host.strip().strip("[]").rstrip(".").lower()


def allow_entry(entry: str) -> tuple[str, int | None]:
    """An allow-list entry as (host, port or None): `mock.internal`, `localhost:3001`,
    `*.corp.example`, `10.0.0.5:8080`, `[fd00::5]:8443`, `fd00::5`."""
    text = entry.strip()
    if text.startswith("[") and "]:" in text:
        host, _, port = text[1:].partition("]:")
        return _host_name(host), int(port)
    if text.count(":") == 1:
        host, _, port = text.partition(":")
        return _host_name(host), int(port)
    return _host_name(text), None


@dataclass(frozen=True)
class EgressPolicy:
    """What outgoing calls may reach besides public addresses: hosts, each on any port or one
    (`allow_entry`), connected to whatever they resolve to; and networks."""

    allow_hosts: frozenset[tuple[str, int | None]] = frozenset()
    allow_cidrs: tuple[IPNetwork, ...] = ()

    @classmethod
    def from_settings(cls, hosts: Iterable[str], cidrs: Iterable[str]) -> EgressPolicy:
        """A policy from the settings' lists; a malformed entry raises `ValueError`."""
        return cls(
            allow_hosts=frozenset(allow_entry(h) for h in hosts if h and h.strip()),
            allow_cidrs=tuple(
                ipaddress.ip_network(c.strip(), strict=False) for c in cidrs if c and c.strip()
            ),
        )

    def host_allowed(self, host: str, port: int) -> bool:
        """True when an entry names `host` (or, `*.suffix`, a parent of it) on any port or on
        `port`."""
        name = _host_name(host)
        return any(
            (name == allowed or (allowed.startswith("*.") and name.endswith(allowed[1:])))
            and allowed_port in (None, port)
            for allowed, allowed_port in self.allow_hosts
        )

    def refusal(self, address: IPAddress) -> str | None:
        """Why a connection to `address` is refused, or None when it may be made."""
        embedded = _embedded_ipv4(address)
        if any(address in net or (embedded is not None and embedded in net)
               for net in self.allow_cidrs):  # fmt: skip
            return None
        return non_public_reason(address)

    def vet(self, host: str, port: int, resolve: Resolver) -> list[str]:
        """The addresses a connection to `host:port` may be opened to, in resolver order: every
        answer of `resolve` when the host is allowed by name, else only when every answer is
        allowed (one private answer refuses the host: a later connect could pick it)."""
        addresses = resolve(_host_name(host), port)
        if not addresses:
            raise httpcore.ConnectError(f"{host} has no address")
        if self.host_allowed(host, port):
            return addresses
        for address in addresses:
            reason = self.refusal(ipaddress.ip_address(address.split("%")[0]))
            if reason is not None:
                raise EgressRefused(host, port, address, reason)
        return addresses


Resolver = Callable[[str, int], list[str]]


def resolve_host(host: str, port: int) -> list[str]:
    """Every address `host` resolves to (A and AAAA, numeric spellings included), in order."""
    try:
        answers = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise httpcore.ConnectError(f"{host} could not be resolved: {exc}") from exc
    return list(dict.fromkeys(str(answer[4][0]) for answer in answers))


_policy_source: Callable[[], EgressPolicy] = EgressPolicy


def configure_egress(source: Callable[[], EgressPolicy]) -> None:
    """Where the policy comes from (the settings, read at every connect); until configured,
    only public addresses."""
    global _policy_source
    _policy_source = source


def egress_policy() -> EgressPolicy:
    """The policy in force now."""
    return _policy_source()


class _VettedBackend(httpcore.SyncBackend):
    """Opens TCP connections only to addresses the policy allows, resolving each host once."""

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        """Resolve `host`, vet every answer, connect to the first vetted address that answers
        (TLS still verifies the certificate against `host`)."""
        # Looked up at each call so tests may stand a resolver in for the system's.
        addresses = egress_policy().vet(host, port, resolve_host)
        failure: Exception | None = None
        for address in addresses:
            try:
                return super().connect_tcp(address, port, timeout, local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None
        raise failure


def _ssl_context(verify: bool) -> ssl.SSLContext:
    # One per TLS setting and CA bundle named by the environment (a context is safe to share
    # between threads): loading the bundle costs milliseconds, and every thread has a client.
    return _ssl_context_for(verify, os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))


@functools.cache
def _ssl_context_for(verify: bool, cert_file: str | None, cert_dir: str | None) -> ssl.SSLContext:
    # `create_ssl_context` reads both variables itself; they are the cache key.
    return httpx.create_ssl_context(verify=verify, trust_env=True)


class EgressTransport(httpx.HTTPTransport):
    """httpx's transport with the egress policy checked at every connection it opens. A client
    given a transport takes no proxy from the environment (one would connect on the policy's
    behalf); CA bundles from the environment (`SSL_CERT_FILE`, `SSL_CERT_DIR`) still apply."""

    def __init__(self, *, verify: bool = True, limits: httpx.Limits | None = None) -> None:
        ssl_context = _ssl_context(verify)
        super().__init__(verify=ssl_context)
        limits = limits or httpx.Limits()
        # httpx offers no hook for the network backend: the same pool as its own, with ours.
        self._pool = httpcore.ConnectionPool(
            ssl_context=ssl_context,
            network_backend=_VettedBackend(),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
        )


# A client that makes one call at a time (`pooled_client`) needs no limit of its pool's own:
# what bounds the calls in flight is the fan-out bulkheads and the threads making them.
# httpx's defaults would add a narrower one: once more than 20 connections are open each
# answer closes its connection, so the next call pays a new TCP (and TLS) handshake.
_ONE_CALL_AT_A_TIME = httpx.Limits(max_connections=None, max_keepalive_connections=None)


def egress_client(*, verify: bool = True, limits: httpx.Limits | None = None) -> httpx.Client:
    """A new client under the egress policy, keeping no cookies and reading no `.netrc`
    credentials (they would go to whatever host a workflow names); httpx's connection limits
    unless `limits` says otherwise."""
    return httpx.Client(
        transport=EgressTransport(verify=verify, limits=limits),
        cookies=CookieJar(policy=DefaultCookiePolicy(allowed_domains=[])),
        trust_env=False,
    )


_clients: dict[bool, httpx.Client] = {}
_clients_lock = threading.Lock()


def shared_client(verify: bool) -> httpx.Client:
    """The process's keep-alive client for one TLS setting (`verify`), under the egress policy
    and keeping no cookies."""
    # One client per TLS setting for the process: its connection pool keeps connections alive
    # between calls (a new client costs ~28 ms of TLS set-up per call). It keeps no cookies, so
    # nothing one call receives goes with another workflow's call.
    client = _clients.get(verify)
    if client is None:
        with _clients_lock:
            client = _clients.get(verify)
            if client is None:
                client = egress_client(verify=verify)
                _clients[verify] = client
    return client


# Idle clients by TLS setting, with when each was given back: the last one on top (its
# connections are the warmest), the oldest at the bottom, closed once its connections would
# have expired anyway (httpcore drops them only when that client calls again).
_idle_clients: dict[bool, deque[tuple[httpx.Client, float]]] = {True: deque(), False: deque()}
IDLE_CLIENT_SECONDS = httpx.Limits().keepalive_expiry or 5.0
# More idle clients than this are closed when given back (a burst past it left them).
IDLE_CLIENTS_MAX = 64


@contextmanager
def pooled_client(verify: bool) -> Iterator[httpx.Client]:
    """A keep-alive client under the egress policy for one call at a time (an HTTP task's):
    an idle one, else a new one; given back after the call for the next one to reuse."""
    # Not `shared_client` for calls that run many at once (fan-out items): httpcore's pool
    # serves every request under one lock and matches each queued request against every open
    # connection, twice a call, so 36 calls in flight on one client cost 1.6 ms of CPU each
    # (1.0 ms with a client each), under the interpreter lock. There are as many clients as
    # calls were ever in flight at once, bounded by the threads making them; `deque` pops and
    # appends are atomic, so taking and giving back need no lock of their own.
    idle = _idle_clients[verify]
    _close_expired(idle, time.monotonic() - IDLE_CLIENT_SECONDS)
    try:
        client = idle.pop()[0]
    except IndexError:
        client = egress_client(verify=verify, limits=_ONE_CALL_AT_A_TIME)
    try:
        yield client
    finally:
        if len(idle) < IDLE_CLIENTS_MAX:
            idle.append((client, time.monotonic()))
        else:
            client.close()


def _close_expired(idle: deque[tuple[httpx.Client, float]], before: float) -> None:
    # The bottom of the deque holds the clients given back longest ago.
    while idle and idle[0][1] < before:
        try:
            client, given_back = idle.popleft()
        except IndexError:
            return  # another thread took the last one
        if given_back < before:
            client.close()
        else:
            idle.appendleft((client, given_back))  # given back meanwhile: a fresh one
            return
