"""Shared fixtures: the conformance corpus, an in-memory resolver, API clients, factories; and the
PostgreSQL requirement: a test marked `postgres` (or `concurrency`) errors at setup, saying so,
when the database is not PostgreSQL, rather than passing or failing for the wrong reason."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from importlib import import_module
from pathlib import Path
from typing import Any

import factory
import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from workflows.documents import ComponentRef, detect_kind

NEEDS_POSTGRES = "needs PostgreSQL (DATABASE_URL=postgres://...)"
_refused: list[str] = []

TESTS_DIR = Path(__file__).resolve().parent
CORPUS_DIR = TESTS_DIR / "conformance" / "vnext-example"
EXAMPLES_DIR = TESTS_DIR.parent / "examples"


@pytest.fixture(autouse=True, scope="session")
def _fast_password_hashing() -> None:
    # Tests create users by the hundred and the production hasher (PBKDF2, 1M rounds) costs a
    # third of a second each; PBKDF2 stays listed, so existing hashes still verify.
    from django.conf import settings

    settings.PASSWORD_HASHERS = [
        "django.contrib.auth.hashers.MD5PasswordHasher",
        "django.contrib.auth.hashers.PBKDF2PasswordHasher",
    ]


# What the suite's own stubs listen on: HTTP-task servers, webhooks and remote runtimes.
LOOPBACK_CIDRS = ["127.0.0.0/8", "::1/128"]


@pytest.fixture(autouse=True)
def _egress_allows_loopback(settings: Any) -> None:
    # The egress policy refuses loopback by default, and the suite's HTTP stubs listen there:
    # every test allows it; the egress tests (`egress_refuses_loopback`) take it back.
    settings.VNEXT = {**getattr(settings, "VNEXT", {}), "EGRESS_ALLOW_CIDRS": LOOPBACK_CIDRS}


@pytest.fixture
def egress_refuses_loopback(settings: Any) -> None:
    """The egress policy as it is out of the box: no host, no network allowed."""
    settings.VNEXT = {**settings.VNEXT, "EGRESS_ALLOW_HOSTS": [], "EGRESS_ALLOW_CIDRS": []}


# Rate limits and the parked long-poll cap (vnext/throttling.py) are off in tests: tests start,
# publish and poll in bursts no client does; the throttle tests turn them on.
NO_LIMITS = {
    "RATE_START_PER_CALLER": None,
    "RATE_START_PER_WORKFLOW": None,
    "RATE_LONG_POLL_PER_CALLER": None,
    "RATE_PUBLISH_PER_CALLER": None,
    "MAX_PARKED_POLLS_PER_CALLER": None,
}


@pytest.fixture(autouse=True, scope="session")
def _no_rate_limits() -> None:
    from django.conf import settings

    settings.VNEXT = {**settings.VNEXT, **NO_LIMITS}


def migration_group(name: str) -> Any:
    """A group a data migration makes (`operators`, `relay-services`), made again when a
    transactional test's flush (which empties the migrations' rows too) removed it earlier in
    this process."""
    from django.contrib.auth.models import Group, Permission

    permissions = {
        "operators": import_module("instances.migrations.0007_operators_group").PERMISSIONS,
        "relay-services": [("instances", "relay_subflow")],
    }[name]
    group, made = Group.objects.get_or_create(name=name)
    if made:
        group.permissions.add(
            *(
                Permission.objects.get(content_type__app_label=app_label, codename=codename)
                for app_label, codename in permissions
            )
        )
    return group


def corpus_files() -> list[Path]:
    """Every JSON file of the conformance corpus."""
    return sorted(CORPUS_DIR.rglob("*.json"))


def load_corpus() -> dict[Path, dict[str, Any]]:
    """The corpus documents by file."""
    return {path: json.loads(path.read_text(encoding="utf-8")) for path in corpus_files()}


def _database() -> tuple[str, str]:
    """The test database's vendor (`postgresql`, `sqlite`, ...) and a name to show for it."""
    from django.db import connections

    connection = connections["default"]
    settings = connection.settings_dict
    name = str(settings.get("NAME"))
    if settings.get("HOST"):
        name += f" at {settings['HOST']}:{settings.get('PORT') or 'default port'}"
    return connection.vendor, name


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Threads or processes racing against the database need PostgreSQL too: a `concurrency`
    test is also a `postgres` one (before `-m` selects)."""
    for item in items:
        if item.get_closest_marker("concurrency") and not item.get_closest_marker("postgres"):
            item.add_marker(pytest.mark.postgres)


def pytest_report_header() -> str:
    vendor, name = _database()
    return f"database: {vendor} ({name})"


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A `postgres` test on another database errors before it starts: a skip would hide the
    coverage that is missing, a run would pass or fail for the wrong reason. `make test`
    always runs on PostgreSQL."""
    if not item.get_closest_marker("postgres"):
        return
    vendor, _ = _database()
    if vendor != "postgresql":
        _refused.append(item.nodeid)
        pytest.fail(
            f"{NEEDS_POSTGRES}: the test database is {vendor}. `make test` runs the "
            "suite on PostgreSQL; to run pytest directly set DATABASE_URL=postgres://..., or "
            "leave these tests out with -m 'not postgres'.",
            pytrace=False,
        )


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _refused:
        vendor, _ = _database()
        terminalreporter.write_line(
            f"{len(_refused)} test(s) marked postgres did not run, the database is {vendor}: "
            f"{NEEDS_POSTGRES}, or -m 'not postgres' to leave them out.",
            red=True,
            bold=True,
        )


class DictResolver:
    """Resolves references against a fixed set of documents (no database)."""

    def __init__(self, documents: list[dict[str, Any]]) -> None:
        self.documents = {ComponentRef.of(doc, detect_kind(doc)): doc for doc in documents}

    def resolve(self, ref: ComponentRef) -> dict[str, Any] | None:
        return self.documents.get(ref)


@pytest.fixture(autouse=True)
def _fresh_component_cache():
    """The registry is emptied between tests; published versions are otherwise immutable, so
    the engine caches them for the life of the process."""
    yield
    from django.core.cache import cache

    from instances.wiring import engine

    # Cached token lookups (vnext/authentication.py) must not outlive the test's users.
    cache.clear()

    components = engine().components
    if hasattr(components, "clear"):
        components.clear()


@pytest.fixture(scope="session")
def corpus() -> dict[Path, dict[str, Any]]:
    return load_corpus()


@pytest.fixture
def corpus_resolver(corpus: dict[Path, dict[str, Any]]) -> DictResolver:
    return DictResolver([copy.deepcopy(doc) for doc in corpus.values()])


@pytest.fixture
def corpus_doc(corpus: dict[Path, dict[str, Any]]) -> Callable[[str], dict[str, Any]]:
    """A fresh copy of a corpus document by its path under vnext-example/core/."""

    def get(relative: str) -> dict[str, Any]:
        return copy.deepcopy(corpus[CORPUS_DIR / "core" / relative])

    return get


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.django.Password("pw-12345678")


class OperatorFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = "operator"
    password = factory.django.Password("pw-12345678")
    is_staff = True
    is_superuser = True


@pytest.fixture
def operator(db: None) -> Any:
    return OperatorFactory()


@pytest.fixture
def operator_client(operator: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(operator)
    return client


@pytest.fixture
def plain_client(db: None) -> APIClient:
    client = APIClient()
    user: Any = UserFactory()
    client.force_authenticate(user)
    return client
