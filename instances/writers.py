"""The engine's instance writers: what the trigger task types (11 start, 12 direct trigger,
14 subprocess) start instances and run transitions with. `ServiceInstanceWriter` calls the
instance services in-process; `RoutingInstanceWriter` sends a target domain another vNext runtime
serves (`VNEXT_REMOTE_DOMAINS`) to that runtime's public REST API over HTTP, with the task's
`timeoutSeconds` and `validateSsl`, under the egress policy (a runtime on a private address needs
an allow-list entry), and every other domain to the local writer.

A SubProcess (14) child is correlated with its parent in this runtime's database, so it always
starts here: a remote target domain fails with `Task:Trigger:Config` (and publish refuses it).

These adapters call the services above the engine's wiring: the app installs the one
`VNEXT["INSTANCE_WRITER"]` names at start-up (`instance_writer`, from `InstancesConfig.ready`),
so the wiring never imports upward."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import httpx
from django.core.exceptions import ImproperlyConfigured

from instances.engine.egress import EgressRefused, shared_client
from instances.engine.errors import Codes, VNextError
from instances.engine.outcomes import PipelineFault, PipelineSuperseded
from instances.engine.ports import CallOptions, InstanceAnswer, InstanceWriter, SubprocessParent
from instances.engine.records import InstanceSnapshot
from instances.engine.task_types.base import StandardResponse, TaskFailure
from instances.job_handlers import job_run, relays_run
from instances.orm_store import OrmStore
from instances.queue import jobs_pending_list
from instances.services import (
    InstanceOutcome,
    RequestInfo,
    instance_start,
    instance_subprocess_start,
    instance_transition_accept,
)
from instances.snapshots import stored_data
from instances.status import InstanceStatus
from instances.sync_transitions import instance_transition_run
from vnext.conf import remote_base_url, vnext_setting

_store = OrmStore()


def instance_writer() -> InstanceWriter | None:
    """The writer `VNEXT["INSTANCE_WRITER"]` names: `routing` (remote domains over HTTP, the
    rest in-process), `local` (every domain in-process) or None (none: the trigger task types
    fail with `Task:Unsupported`)."""
    name = vnext_setting("INSTANCE_WRITER")
    if not name:
        return None
    writers: dict[str, Callable[[], InstanceWriter]] = {
        "routing": RoutingInstanceWriter,
        "local": ServiceInstanceWriter,
    }
    if name not in writers:
        raise ImproperlyConfigured(
            f"VNEXT['INSTANCE_WRITER'] is {name!r}: one of {sorted(writers)} or None"
        )
    return writers[name]()


# --- in-process: the instance services --------------------------------------------------------


class ServiceInstanceWriter:
    """`InstanceWriter` on the instance services, in-process: what the trigger task types
    (11 start, 12 direct trigger, 14 subprocess) answer is what the public API would."""

    def start(
        self,
        *,
        domain: str,
        flow: str,
        version: str | None,
        key: str | None,
        tags: list[str],
        body: dict[str, Any],
        sync: bool,
        headers: dict[str, str],
        parent: SubprocessParent | None = None,
        options: CallOptions | None = None,
    ) -> InstanceAnswer:
        """Start an instance (a SubProcess child when `parent` is given); 409 when a live
        instance already has `key`. In-process: `options` (remote call settings) do not apply."""
        request: dict[str, Any] = {"attributes": body, "tags": tags}
        if key:
            request["key"] = key
        info = RequestInfo(actor="task", headers=headers)

        def run() -> InstanceOutcome:
            if parent is not None:
                return instance_subprocess_start(
                    domain=domain,
                    workflow=flow,
                    body=request,
                    info=info,
                    version=version,
                    parent_id=parent.instance_id,
                    parent_state=parent.state,
                )
            return instance_start(
                domain=domain, workflow=flow, body=request, info=info, version=version, sync=sync
            )

        answer = _answer_of(run)
        if isinstance(answer, InstanceAnswer):
            return answer
        if not answer.created:
            return InstanceAnswer(
                409,
                {
                    "errorCode": Codes.INSTANCE_KEY_EXISTS.code,
                    "detail": f"instance {answer.instance.id} of {flow} already has key {key!r}",
                    "id": str(answer.instance.id),
                },
            )
        if parent is not None and sync:
            # The subprocess' start job runs here, to its first rest point.
            for job_id in jobs_pending_list(instance_id=answer.instance.id):
                job_run(job_id)
            return _instance_answer(_store.load(answer.instance.id) or answer.instance, 200)
        return _settled(answer, sync)

    def trigger(
        self,
        *,
        domain: str,
        flow: str,
        ref: str,
        transition: str,
        body: dict[str, Any],
        sync: bool,
        headers: dict[str, str],
        options: CallOptions | None = None,
    ) -> InstanceAnswer:
        """Run `transition` on instance `ref` of `flow`, as `PATCH .../transitions/...`."""
        run = instance_transition_run if sync else instance_transition_accept
        info = RequestInfo(actor="task", headers=headers)
        answer = _answer_of(
            lambda: run(
                domain=domain,
                workflow=flow,
                ref=ref,
                transition_key=transition,
                body={"attributes": body},
                info=info,
            )
        )
        if isinstance(answer, InstanceAnswer):
            return answer
        return _settled(answer, sync)


def _answer_of(run: Callable[[], InstanceOutcome]) -> InstanceOutcome | InstanceAnswer:
    try:
        return run()
    except PipelineSuperseded as superseded:
        now = _store.load(superseded.instance_id)
        body = {"id": str(superseded.instance_id)}
        if now is not None:
            body = _instance_answer(now, 200).body
        error = {"errorCode": superseded.code, "detail": superseded.message}
        return InstanceAnswer(200, {**body, "error": error})
    except PipelineFault as fault:
        faulted = _store.load(fault.instance_id)
        body = {"id": str(fault.instance_id), "status": InstanceStatus.FAULTED}
        if faulted is not None:
            body = _instance_answer(faulted, 200).body
        return InstanceAnswer(200, {**body, "error": {"errorCode": fault.code}})
    except VNextError as error:
        return InstanceAnswer(
            error.error.http_status, {"errorCode": error.code, "detail": error.detail}
        )


def _settled(outcome: InstanceOutcome, sync: bool) -> InstanceAnswer:
    if not sync or outcome.queued:
        return InstanceAnswer(
            202, {"id": str(outcome.instance.id), "status": outcome.instance.status}
        )
    instance = outcome.instance
    if outcome.execution is not None and outcome.execution.relays:
        relays_run(outcome.execution.instance.id)
        instance = _store.load(instance.id) or instance
    if outcome.addressed is not None:
        instance = _store.load(outcome.addressed) or instance
    return _instance_answer(instance, 200)


def _instance_answer(instance: InstanceSnapshot, status: int) -> InstanceAnswer:
    # Another instance's answer: its fields encrypted at rest stay sealed (their tokens).
    return InstanceAnswer(
        status,
        {
            "id": str(instance.id),
            "key": instance.key,
            "status": str(instance.status),
            "state": instance.current_state,
            "attributes": stored_data(instance),
        },
    )


# --- remote: another vNext runtime's REST API -------------------------------------------------

DEFAULT_TIMEOUT_SECONDS = 30.0


class RoutingInstanceWriter:
    """`InstanceWriter`: a remote domain over HTTP, any other in-process."""

    def __init__(self) -> None:
        self.local = ServiceInstanceWriter()

    def start(
        self,
        *,
        domain: str,
        flow: str,
        version: str | None,
        key: str | None,
        tags: list[str],
        body: dict[str, Any],
        sync: bool,
        headers: dict[str, str],
        parent: SubprocessParent | None = None,
        options: CallOptions | None = None,
    ) -> InstanceAnswer:
        """Start an instance of `flow`, here or on the runtime serving `domain`."""
        base = remote_base_url(domain)
        if base is None:
            return self.local.start(
                domain=domain, flow=flow, version=version, key=key, tags=tags, body=body,
                sync=sync, headers=headers, parent=parent,
            )  # fmt: skip
        if parent is not None:
            raise TaskFailure(
                Codes.TASK_TRIGGER_CONFIG,
                f"a SubProcess child starts in this runtime; domain {domain!r} is served by {base}",
            )
        request: dict[str, Any] = {"attributes": body, "tags": tags}
        if key:
            request["key"] = key
        query = {"sync": "true" if sync else "false", **({"version": version} if version else {})}
        path = f"/{_segment(domain)}/workflows/{_segment(flow)}/instances/start"
        return _call("POST", base, path, domain, query, request, headers, options)

    def trigger(
        self,
        *,
        domain: str,
        flow: str,
        ref: str,
        transition: str,
        body: dict[str, Any],
        sync: bool,
        headers: dict[str, str],
        options: CallOptions | None = None,
    ) -> InstanceAnswer:
        """Run `transition` on instance `ref` of `flow`, here or on the runtime serving
        `domain`."""
        base = remote_base_url(domain)
        if base is None:
            return self.local.trigger(
                domain=domain, flow=flow, ref=ref, transition=transition, body=body, sync=sync,
                headers=headers,
            )  # fmt: skip
        path = (
            f"/{_segment(domain)}/workflows/{_segment(flow)}/instances/{_segment(ref)}"
            f"/transitions/{_segment(transition)}"
        )
        query = {"sync": "true" if sync else "false"}
        return _call("PATCH", base, path, domain, query, {"attributes": body}, headers, options)


def _segment(value: str) -> str:
    return quote(value, safe="")


def _call(
    method: str,
    base: str,
    path: str,
    domain: str,
    query: dict[str, str],
    body: dict[str, Any],
    headers: dict[str, str],
    options: CallOptions | None,
) -> InstanceAnswer:
    options = options or CallOptions()
    timeout = options.timeout_seconds or DEFAULT_TIMEOUT_SECONDS
    sent = dict(headers)
    token = (vnext_setting("REMOTE_TOKENS") or {}).get(domain)
    if token:
        # The operator's credential for that runtime wins over any the workflow's task set.
        sent = {k: v for k, v in sent.items() if k.lower() != "authorization"}
        sent["Authorization"] = f"Token {token}"
    try:
        response = shared_client(options.validate_ssl).request(
            method, base + path, params=query, json=body, headers=sent, timeout=timeout
        )
    except EgressRefused as exc:
        raise TaskFailure(Codes.TASK_EGRESS_REFUSED, f"{method} {base}{path}: {exc}") from exc
    except httpx.TimeoutException as exc:
        message = f"{method} {base}{path} timed out after {timeout:g} s"
        raise TaskFailure(Codes.TASK_HTTP_TIMEOUT, message, _unanswered(message)) from exc
    except httpx.HTTPError as exc:
        message = f"{method} {base}{path} failed: {exc}"
        raise TaskFailure(Codes.TASK_HTTP_TRANSPORT, message, _unanswered(message)) from exc
    try:
        answer = response.json()
    except ValueError:
        answer = {"detail": response.text[:500]}
    return InstanceAnswer(
        response.status_code, answer if isinstance(answer, dict) else {"body": answer}
    )


def _unanswered(message: str) -> StandardResponse:
    return StandardResponse(status_code=None, is_success=False, error_message=message)
