"""A named service's or endpoint's path stays under the target's base URL: the target's own
credential headers go with every call, so a definition must not reach another route of its
host (dot segments, encoded or not, a path that resolves above the base) or another host."""

from __future__ import annotations

import pytest

from instances.engine.task_types.named import target_url

BASE = "http://svc:8080/api/v1"


@pytest.mark.parametrize(
    ("path", "query", "url"),
    [
        ("orders/1", "", "http://svc:8080/api/v1/orders/1"),
        ("/orders", "state=open", "http://svc:8080/api/v1/orders?state=open"),
        ("", "", BASE),
    ],
)
def test_a_path_under_the_base_is_joined(path: str, query: str, url: str):
    assert target_url(BASE, path, query) == url


@pytest.mark.parametrize(
    "path",
    ["x/../../admin", "..", "./orders", "%2e%2e/admin", "a/%2E%2E/b"],
)
def test_a_path_that_leaves_the_base_is_refused(path: str):
    with pytest.raises(ValueError, match="leaves"):
        target_url(BASE, path)
