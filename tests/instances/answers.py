"""What a sync run (`?sync=true` start, transition or retry) that faulted its instance answers:
200 with the instance envelope, status `F`, and an `error` block naming the code, the detail and
the open incident (`.../instances/<id>/incidents/active`). Faults the caller caused
(`ResourceLockConflict`, `Instance:DataRefused`) and refusals before anything was written keep
their own status and problem body; these helpers are not for them."""

from __future__ import annotations

from typing import Any, Protocol


class _Answer(Protocol):
    """A test client's or httpx's response."""

    status_code: int

    def json(self) -> Any: ...


def fault(response: _Answer) -> dict[str, Any]:
    """The `error` block of a sync answer that faulted its instance; asserts the answer is a
    200 envelope of that instance, status `F`, whose block links the instance's open incident."""
    body = response.json()
    assert response.status_code == 200, body
    assert body["status"] == "F", body
    error = body["error"]
    assert isinstance(error, dict), body
    assert error["incident"]["href"].endswith(f"/instances/{body['id']}/incidents/active"), body
    assert isinstance(error["detail"], str), body
    return error


def fault_code(response: _Answer) -> str:
    """The error code of a sync answer that faulted its instance (see `fault`)."""
    return str(fault(response)["errorCode"])
