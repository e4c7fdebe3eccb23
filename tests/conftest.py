"""Shared fixtures: the conformance corpus, an in-memory resolver, API clients, factories."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import factory
import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from workflows.documents import ComponentRef, detect_kind

TESTS_DIR = Path(__file__).resolve().parent
CORPUS_DIR = TESTS_DIR / "conformance" / "vnext-example"
EXAMPLES_DIR = TESTS_DIR.parent / "examples"


def corpus_files() -> list[Path]:
    """Every JSON file of the conformance corpus."""
    return sorted(CORPUS_DIR.rglob("*.json"))


def load_corpus() -> dict[Path, dict[str, Any]]:
    """The corpus documents by file."""
    return {path: json.loads(path.read_text(encoding="utf-8")) for path in corpus_files()}


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
    from instances.services import engine

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
