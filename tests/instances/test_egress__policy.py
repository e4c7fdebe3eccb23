"""The egress policy (issue 30, item 1): an HTTP task whose URL comes from instance data, a
notification webhook and a remote domain reach no loopback, private, link-local, unspecified,
multicast or reserved address, in any spelling (numeric, IPv6, IPv4-mapped IPv6, `localhost`),
after DNS resolution (every answer, once: no rebinding) and on every redirect; the allow-lists
by host and CIDR are honoured. A refused HTTP task faults its instance with `Task:EgressRefused`.

Every test here runs with the policy as shipped (`egress_refuses_loopback`), against a loopback
server that would answer if it were reached."""

from __future__ import annotations

import datetime
import os
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpcore
import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from instances.engine import egress
from instances.engine.egress import EgressPolicy, EgressRefused, egress_client
from instances.engine.task_types.base import TaskFailure
from instances.models import Incident, Instance
from instances.notifications import Notification, NotificationFailed, WebhookChannel
from instances.writers import RoutingInstanceWriter
from tests.engine.builders import state, transition, workflow
from tests.instances.answers import fault
from tests.instances.workflows import http_ref, http_task, publish
from tests.site.server import ROOT

pytestmark = pytest.mark.usefixtures("egress_refuses_loopback")
BASE = "/api/v1/core/workflows/fetcher/instances"
# The task calls whatever URL the instance data names: the attacker's lever in the issue.
FROM_DATA = "def input_handler(task, context):\n    task.url = context.instance.data['target']\n"


class _Recorder(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.server.hits.append(self.path)  # type: ignore[attr-defined]
        location = self.server.redirect_to  # type: ignore[attr-defined]
        self.send_response(302 if location else 200)
        if location:
            self.send_header("Location", location)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    do_POST = do_GET

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def loopback_server(
    host: str = "127.0.0.1", redirect_to: str = "", tls: ssl.SSLContext | None = None
) -> Iterator[Any]:
    """A server on `host` recording the paths it was asked for (and redirecting, if told;
    HTTPS with `tls`)."""
    server = ThreadingHTTPServer((host, 0), _Recorder)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    server.hits = []  # type: ignore[attr-defined]
    server.redirect_to = redirect_to  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def port_of(server: Any) -> int:
    return int(server.server_address[1])


# --- every spelling of the local machine, through a real client ----------------------------------

LOOPBACK_FORMS = [
    "127.0.0.1",
    "localhost",
    "LOCALHOST.",
    "2130706433",
    "0x7f.1",
    "0x7f000001",
    "127.1",
    "0.0.0.0",
    "[::1]",
    "[::ffff:127.0.0.1]",
    "[::ffff:7f00:1]",
    "[::]",
]


@pytest.mark.parametrize("host", LOOPBACK_FORMS)
def test_every_spelling_of_the_local_machine_is_refused_before_connecting(host: str):
    with loopback_server() as server, egress_client() as client:
        with pytest.raises(EgressRefused) as refused:
            client.get(f"http://{host}:{port_of(server)}/admin/login/")

        assert server.hits == []
        assert "refused" in str(refused.value)
        assert "VNEXT_EGRESS_ALLOW_HOSTS" in str(refused.value)


def test_an_octal_dotted_address_is_no_url_at_all():
    # httpx refuses `0177.0.0.1` itself (an invalid IPv4 literal): nothing is connected either.
    with loopback_server() as server, egress_client() as client:
        with pytest.raises(Exception, match="Invalid IPv4 address"):
            client.get(f"http://0177.0.0.1:{port_of(server)}/")
        assert server.hits == []


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "link-local"),
        ("100.64.0.1", "not globally routable"),
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("255.255.255.255", "private"),
        ("fe80::1", "link-local"),
        ("fc00::1", "private"),
        ("ff02::1", "multicast"),
        ("::ffff:10.0.0.1", "private (IPv4 10.0.0.1 inside IPv6)"),
        ("64:ff9b::7f00:1", "loopback (IPv4 127.0.0.1 inside IPv6)"),
        ("2002:a00:1::1", "private (IPv4 10.0.0.1 inside IPv6)"),
    ],
)
def test_non_public_addresses_are_refused_with_why(address: str, reason: str):
    policy = EgressPolicy()

    with pytest.raises(EgressRefused) as refused:
        policy.vet("service.example", 443, lambda host, port: [address])

    assert refused.value.reason == reason
    assert refused.value.address == address


def test_a_public_address_passes():
    assert EgressPolicy().vet("api.example", 443, lambda h, p: ["93.184.216.34"]) == [
        "93.184.216.34"
    ]


def test_one_private_answer_among_public_ones_refuses_the_host():
    # A connect may pick any answer: all of them must be allowed.
    answers = ["93.184.216.34", "2606:2800:220:1::1", "127.0.0.1"]
    with pytest.raises(EgressRefused) as refused:
        EgressPolicy().vet("mixed.example", 80, lambda h, p: answers)
    assert refused.value.address == "127.0.0.1"


# --- DNS rebinding and redirects -----------------------------------------------------------------


class FlippingResolver:
    """A rebinding name: its first answer is one address, every later answer another."""

    def __init__(self, first: str, then: str) -> None:
        self.first, self.then, self.calls = first, then, 0

    def __call__(self, host: str, port: int) -> list[str]:
        self.calls += 1
        return [self.first if self.calls == 1 else self.then]


def test_a_rebinding_name_is_connected_to_the_address_that_was_vetted(settings, monkeypatch):
    # 127.0.0.2 plays the acceptable answer (allowed by CIDR), 127.0.0.1 the private one that a
    # second resolution at connect time would have reached.
    settings.VNEXT = {**settings.VNEXT, "EGRESS_ALLOW_CIDRS": ["127.0.0.2/32"]}
    with loopback_server("127.0.0.2") as vetted, loopback_server("127.0.0.1") as private:
        port = port_of(vetted)
        private_port = port_of(private)
        resolver = FlippingResolver("127.0.0.2", "127.0.0.1")
        monkeypatch.setattr(egress, "resolve_host", resolver)

        with egress_client() as client:
            assert client.get(f"http://rebind.example:{port}/first").status_code == 200
        assert resolver.calls == 1  # resolved once: the connect used the vetted answer
        assert vetted.hits == ["/first"]

        with egress_client() as client, pytest.raises(EgressRefused) as refused:
            client.get(f"http://rebind.example:{private_port}/second")
        assert refused.value.address == "127.0.0.1"
        assert private.hits == []


def test_a_redirect_to_a_private_address_is_refused(settings):
    with loopback_server() as private:
        target = f"http://127.0.0.1:{port_of(private)}/metrics"
        with loopback_server(redirect_to=target) as public:
            # The redirecting server is allowed by name, the address it sends to is not.
            settings.VNEXT = {
                **settings.VNEXT,
                "EGRESS_ALLOW_HOSTS": [f"localhost:{port_of(public)}"],
            }
            with egress_client() as client, pytest.raises(EgressRefused):
                client.get(f"http://localhost:{port_of(public)}/go", follow_redirects=True)

            assert public.hits == ["/go"]
            assert private.hits == []


@pytest.mark.django_db
def test_an_http_task_does_not_follow_a_redirect_to_a_private_address(operator_client, settings):
    with (
        loopback_server() as private,
        loopback_server(redirect_to=f"http://127.0.0.1:{port_of(private)}/metrics") as public,
    ):
        settings.VNEXT = {**settings.VNEXT, "EGRESS_ALLOW_HOSTS": [f"localhost:{port_of(public)}"]}
        publish_fetcher()

        response = run_fetch(operator_client, f"http://localhost:{port_of(public)}/go")

        assert response.status_code == 200, response.json()
        assert public.hits == ["/go"]
        assert private.hits == []


def self_signed(folder: Path, name: str) -> tuple[Path, Path]:
    """A certificate for DNS name `name` (its own CA) and its key, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / f"{name}.pem", folder / f"{name}.key"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


@pytest.mark.parametrize(("certified", "verified"), [("localhost", True), ("other.example", False)])
def test_tls_is_verified_against_the_host_name_not_the_vetted_address(
    tmp_path, settings, monkeypatch, certified: str, verified: bool
):
    # The socket goes to 127.0.0.1 (the vetted answer); the certificate must still name the
    # host the URL asked for.
    cert_file, key_file = self_signed(tmp_path, certified)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert_file))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    with loopback_server(tls=context) as server:
        port = port_of(server)
        settings.VNEXT = {**settings.VNEXT, "EGRESS_ALLOW_HOSTS": [f"localhost:{port}"]}

        with egress_client() as client:
            if verified:
                assert client.get(f"https://localhost:{port}/tls").status_code == 200
                assert server.hits == ["/tls"]
            else:
                with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                    client.get(f"https://localhost:{port}/tls")
                assert server.hits == []


# --- through the platform: HTTP tasks, webhooks, remote domains ----------------------------------


def publish_fetcher() -> None:
    publish(
        http_task("fetch", "http://placeholder.invalid/"),
        workflow(
            [
                state(
                    "idle",
                    1,
                    [
                        transition(
                            "fetch", "done", onExecutionTasks=[http_ref("fetch", mapping=FROM_DATA)]
                        )
                    ],
                ),
                state("done", 2),
            ],
            key="fetcher",
        ),
    )


def run_fetch(client: Any, target: str) -> Any:
    created = client.post(f"{BASE}/start?sync=true", {"target": target}, format="json").json()
    return client.patch(f"{BASE}/{created['id']}/transitions/fetch?sync=true", {}, format="json")


@pytest.mark.django_db
@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "2130706433", "[::ffff:127.0.0.1]"])
def test_an_http_task_to_the_local_machine_faults_with_egress_refused(operator_client, host):
    publish_fetcher()
    with loopback_server() as server:
        response = run_fetch(operator_client, f"http://{host}:{port_of(server)}/admin/login/")

        error = fault(response)
        assert error["errorCode"] == "Task:EgressRefused"
        assert "refused" in error["detail"]
        assert server.hits == []
    instance = Instance.objects.get(pk=response.json()["id"])
    assert instance.status == "F"
    incident = Incident.objects.get(instance=instance)
    assert incident.error_code == "Task:EgressRefused"


@pytest.mark.django_db
def test_an_allowed_host_and_port_is_reached(operator_client, settings):
    publish_fetcher()
    with loopback_server() as server:
        settings.VNEXT = {**settings.VNEXT, "EGRESS_ALLOW_HOSTS": [f"localhost:{port_of(server)}"]}

        allowed = run_fetch(operator_client, f"http://localhost:{port_of(server)}/mock")
        other_port = run_fetch(operator_client, f"http://localhost:{port_of(server) + 1}/x")

        assert allowed.status_code == 200, allowed.json()
        assert allowed.json()["status"] == "A"
        assert server.hits == ["/mock"]
        assert fault(other_port)["errorCode"] == "Task:EgressRefused"


@pytest.mark.django_db
def test_an_allowed_network_is_reached(operator_client, settings):
    publish_fetcher()
    settings.VNEXT = {**settings.VNEXT, "EGRESS_ALLOW_CIDRS": ["127.0.0.0/30"]}
    with loopback_server() as server:
        response = run_fetch(operator_client, f"http://127.0.0.1:{port_of(server)}/mock")

        assert response.json()["status"] == "A", response.json()
        assert server.hits == ["/mock"]


def test_a_wildcard_host_entry_allows_its_subdomains_only():
    policy = EgressPolicy.from_settings(["*.corp.example"], [])
    private = lambda host, port: ["10.0.0.7"]  # noqa: E731

    assert policy.vet("api.corp.example", 443, private) == ["10.0.0.7"]
    with pytest.raises(EgressRefused):
        policy.vet("corp.example.evil", 443, private)


@pytest.mark.parametrize(
    ("entry", "host", "port", "allowed"),
    [
        ("localhost:3001", "localhost", 3001, True),
        ("localhost:3001", "localhost", 3002, False),
        ("mock.internal", "MOCK.internal.", 8080, True),
        ("10.0.0.5:8080", "10.0.0.5", 8080, True),
        ("[fd00::5]:8443", "fd00::5", 8443, True),
        ("[fd00::5]:8443", "fd00::5", 443, False),
        ("fd00::5", "fd00::5", 443, True),
        ("*.corp.example:443", "api.corp.example", 443, True),
        ("*.corp.example:443", "api.corp.example", 80, False),
    ],
)
def test_host_entries_name_a_host_on_any_port_or_one(entry, host, port, allowed):
    assert EgressPolicy.from_settings([entry], []).host_allowed(host, port) is allowed


def test_a_name_that_does_not_resolve_is_a_connection_failure_not_a_refusal(monkeypatch):
    def nowhere(host: str, port: int) -> list[str]:
        raise httpcore.ConnectError(f"{host} could not be resolved")

    monkeypatch.setattr(egress, "resolve_host", nowhere)
    with egress_client() as client, pytest.raises(Exception, match="could not be resolved"):
        client.get("http://nowhere.invalid/")


def test_a_notification_webhook_on_the_local_machine_is_not_delivered(settings):
    with loopback_server() as hook:
        settings.VNEXT = {
            **settings.VNEXT,
            "NOTIFICATION_WEBHOOK_URL": f"http://localhost:{port_of(hook)}/hook",
        }
        notification = Notification(
            id="n-1", domain="core", workflow="w", instance_id="i", instance_key=None,
            state="s", transition="t", entered_at="2026-01-01T00:00:00Z", content={},
        )  # fmt: skip

        with pytest.raises(NotificationFailed, match="egress to localhost"):
            WebhookChannel().send(notification)
        assert hook.hits == []


def test_a_remote_domain_on_the_local_machine_fails_the_task_with_egress_refused(settings):
    with loopback_server() as runtime:
        base = f"http://127.0.0.1:{port_of(runtime)}/api/v1"
        settings.VNEXT = {**settings.VNEXT, "REMOTE_DOMAINS": {"payments": base}}

        with pytest.raises(TaskFailure) as failed:
            RoutingInstanceWriter().start(
                domain="payments", flow="pay", version=None, key=None, tags=[], body={},
                sync=True, headers={},
            )  # fmt: skip

        assert failed.value.code == "Task:EgressRefused"
        assert runtime.hits == []


# --- the settings, as a process reads them from its environment ----------------------------------

PRINT_POLICY = (
    "import django; django.setup(); "
    "from instances.engine.egress import egress_policy; p = egress_policy(); "
    "print(sorted(p.allow_hosts, key=str), [str(n) for n in p.allow_cidrs])"
)


def boot(**env: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "DJANGO_SETTINGS_MODULE": "vnext.settings", **env}
    return subprocess.run(
        [sys.executable, "-c", PRINT_POLICY], cwd=ROOT, env=environment,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_the_allow_lists_are_read_comma_separated_from_the_environment():
    booted = boot(
        VNEXT_EGRESS_ALLOW_HOSTS="localhost:3001,*.corp.example,[fd00::5]:8443",
        VNEXT_EGRESS_ALLOW_CIDRS="10.20.0.0/16, 127.0.0.1",
    )

    assert booted.returncode == 0, booted.stderr
    assert booted.stdout.strip().splitlines()[-1] == (
        "[('*.corp.example', None), ('fd00::5', 8443), ('localhost', 3001)] "
        "['10.20.0.0/16', '127.0.0.1/32']"
    )


def test_a_process_refuses_to_boot_with_a_malformed_cidr():
    booted = boot(VNEXT_EGRESS_ALLOW_CIDRS="10.20.0.0/33")

    assert booted.returncode != 0
    assert "VNEXT_EGRESS_ALLOW_CIDRS" in booted.stderr
    assert "10.20.0.0/33" in booted.stderr


def test_pooled_clients_given_back_long_ago_are_closed_and_the_idle_list_is_capped(monkeypatch):
    idle: Any = egress._idle_clients[True]
    monkeypatch.setattr(egress, "IDLE_CLIENTS_MAX", 2)
    saved = list(idle)  # the process's own list: put back after
    idle.clear()
    try:
        stale = egress.egress_client()
        idle.append((stale, 0.0))  # given back at the monotonic clock's start: expired
        with (
            egress.pooled_client(True) as first,
            egress.pooled_client(True) as second,
            egress.pooled_client(True) as third,
        ):
            assert stale not in (first, second, third)
        assert stale.is_closed
        kept = [client for client, _ in idle]
        assert kept == [third, second]  # given back first; the last one found the list full
        assert first.is_closed
        assert not second.is_closed
        assert not third.is_closed
    finally:
        for client, _ in idle:
            client.close()
        idle.clear()
        idle.extend(saved)
