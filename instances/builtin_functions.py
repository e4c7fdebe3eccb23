"""The built-in functions of an instance (API.md section 3, seed 001): `functions/state` (where
the instance is and what a client can do next), `data`, `view` and `schema`, and the cache their
answers are kept in while the instance is unchanged."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar, cast

from django.core.cache import cache

from instances.engine.definition import (
    DEFAULT_FALLBACK_SECONDS,
    StateDef,
    TransitionDef,
    TransitionKind,
    WorkflowDefinition,
    schema_reference,
)
from instances.engine.errors import Codes, VNextError
from instances.engine.records import InstanceSnapshot
from instances.engine.roles import allowed
from instances.engine.view_selection import (
    ViewChoice,
    is_conditional,
    names_a_view,
    select_view,
    view_slot,
)
from instances.engine.visibility import (
    label_of,
    state_value,
)
from instances.job_payloads import TimerJob
from instances.queue import job_timeout_pending_get, jobs_timers_list
from instances.selectors import incident_active_get, incident_block
from instances.snapshots import protection_for
from instances.status import (
    InstanceStatus,
    Trigger,
)
from instances.wiring import engine
from vnext.conf import header_deny_list, vnext_setting


def _href(base: str, *parts: str) -> str:
    return "/".join([base.rstrip("/"), *parts])


def _transition_kind(transition: TransitionDef) -> str | None:
    return {
        TransitionKind.CANCEL: "cancel",
        TransitionKind.EXIT: "exit",
        TransitionKind.UPDATE_DATA: "updateData",
    }.get(transition.kind)


def with_state_etag(body: dict[str, Any]) -> dict[str, Any]:
    """Stamp the state function's body with its eTag: a digest of everything else in it, so it
    changes exactly when what a client sees changes (state, status, transitions, timers,
    correlations, the incident block) and not on data-only writes."""
    content = {key: value for key, value in body.items() if key != "eTag"}
    digest = hashlib.sha256(
        json.dumps(content, sort_keys=True, separators=(",", ":"), default=str).encode()
    )
    return {**content, "eTag": digest.hexdigest()[:32]}


def state_function(
    definition: WorkflowDefinition,
    instance: InstanceSnapshot,
    base: str,
    *,
    correlations: list[dict[str, Any]] | None = None,
    data_base: str | None = None,
    roles: frozenset[str] | None = None,
    languages: list[str] | None = None,
    headers: dict[str, str] | None = None,
    query: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """`functions/state`: where the instance is and what a client can do next. For a parent
    waiting on a SubFlow chain the caller passes the leaf (the only state a client acts on),
    the chain as `correlations`, and the leaf's own path as `data_base`.

    With the caller's `roles` (instance-relative ones included; a parent's SubFlow role
    overrides replace the definition's) only the transitions they may fire are listed, `state`
    is masked by the state's alias and the long-poll `interaction` shows only to callers its
    roles allow; labels are given in the first of `languages` that has one. The `view` block
    describes what the view function would serve this request (`headers`, `query`: what view
    rules read)."""
    wanted = languages or []
    state = definition.states.get(instance.current_state)
    state_labels = (state.raw.get("labels") if state else None) or []
    view = _chosen_view(definition, instance, None, roles=roles, headers=headers, query=query)
    live = instance.status != InstanceStatus.COMPLETED
    transitions = _manual_transitions(definition, instance, base, wanted, roles) if live else []
    if instance.status == InstanceStatus.FAULTED:
        transitions.append({"name": "retry", "href": _href(base, "retry"), "kind": "retry"})
    transitions += _scheduled_transitions(instance, base)
    incident = incident_active_get(instance=instance)
    own = data_base or base
    body: dict[str, Any] = {
        "data": {"href": _data_href(own, (state.raw.get("view") if state else None))},
        "view": {
            "hasView": view is not None,
            "loadData": view.load_data if view is not None else False,
            "href": _href(own, "functions/view"),
            **_view_labels(view.reference if view is not None else None, wanted),
            **_extensions_block(state.raw.get("view") if state else None),
        },
        "state": state_value(state, instance.current_state, roles or frozenset(), wanted),
        "label": label_of(state_labels, wanted, instance.current_state),
        "labels": state_labels,
        "status": str(instance.status),
        "stateType": instance.effective_state_type,
        "stateSubType": instance.effective_state_subtype,
        "activeCorrelations": correlations or [],
        "transitions": transitions,
        "incident": incident_block(instance, incident),
    }
    deadline = job_timeout_pending_get(instance_id=instance.id)
    interaction = _interaction(state, roles, own)
    if interaction is not None:
        body["interaction"] = interaction
    timeout = definition.timeout_for(instance.extra)
    if timeout is not None and live and deadline is not None:
        body["timeout"] = {
            "key": timeout.key,
            "target": timeout.target,
            "targetState": _state_ref(
                definition.states.get(timeout.target), timeout.target, wanted
            ),
            "labels": timeout.raw.get("labels") or [],
            "executeAtUtc": _utc(deadline.run_at),
            **_cron_of(TimerJob.from_json(deadline.payload)),
        }
    return body


def _manual_transitions(
    definition: WorkflowDefinition,
    instance: InstanceSnapshot,
    base: str,
    wanted: list[str],
    roles: frozenset[str] | None,
) -> list[dict[str, Any]]:
    """The manual transitions of the instance's state the caller may fire (a faulted instance:
    only cancel and exit, until it is retried)."""
    faulted = instance.status == InstanceStatus.FAULTED
    entries: list[dict[str, Any]] = []
    for transition in definition.available_transitions(instance.current_state):
        if transition.trigger_type != Trigger.MANUAL:
            continue
        if faulted and transition.kind not in (TransitionKind.CANCEL, TransitionKind.EXIT):
            continue  # a faulted instance runs nothing else until it is retried
        if roles is not None and not transition.allows(
            instance.current_state, roles, instance.overrides
        ):
            continue
        target_key = transition.resolved_target(instance.current_state)
        target = definition.states.get(target_key)
        entry: dict[str, Any] = {
            "name": transition.key,
            "href": _href(base, "transitions", transition.key),
            "label": label_of(transition.raw.get("labels"), wanted, transition.key),
            "labels": transition.raw.get("labels") or [],
            "target": _state_ref(target, target_key, wanted),
            "view": {
                # Named, not chosen: the rules of a conditional view run when it is asked for.
                "hasView": names_a_view(transition.raw.get("view")),
                "href": _href(base, f"functions/view?transitionKey={transition.key}"),
                **_extensions_block(transition.raw.get("view")),
            },
            "schema": {
                "hasSchema": bool(transition.raw.get("schema")),
                "href": _href(base, f"functions/schema?transitionKey={transition.key}"),
            },
        }
        kind = _transition_kind(transition)
        if kind:
            entry["kind"] = kind
        entries.append(entry)
    return entries


def _scheduled_transitions(instance: InstanceSnapshot, base: str) -> list[dict[str, Any]]:
    """The instance's armed timers, soonest first, as `scheduled` transitions."""
    entries = []
    for job in jobs_timers_list(instance_id=instance.id):
        timer = TimerJob.from_json(job.payload)
        entries.append(
            {
                "name": timer.transition,
                "href": _href(base, "transitions", timer.transition),
                "kind": "scheduled",
                "executeAtUtc": _utc(job.run_at),
                **_cron_of(timer),
            }
        )
    return entries


def _cron_of(timer: TimerJob) -> dict[str, Any]:
    """A cron timer's schedule, beside its next occurrence (`executeAtUtc`): `{"cron":
    {"expression", "timeZone"}}`; nothing for a one-shot timer (an additive field)."""
    if not timer.cron:
        return {}
    return {"cron": {"expression": timer.cron, "timeZone": timer.time_zone or "UTC"}}


def _interaction(
    state: StateDef | None, roles: frozenset[str] | None, own: str
) -> dict[str, Any] | None:
    """The long-poll `interaction` block of a state that declares one, for callers its roles
    allow (`own`: the path the acknowledgement goes to); None otherwise."""
    long_poll = state.long_poll if state is not None else None
    if long_poll is None or (roles is not None and not allowed(long_poll.get("roles"), roles)):
        return None
    terminate = bool(long_poll.get("terminate"))
    interaction: dict[str, Any] = {
        "terminateLongPoll": terminate,
        "fallbackTimeoutSeconds": int(
            long_poll.get("fallbackTimeoutSeconds") or DEFAULT_FALLBACK_SECONDS
        ),
    }
    if terminate:
        interaction["ack"] = {"href": _href(own, "longpoll/ack")}
    return interaction


def _utc(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def _view_extensions(view: Any) -> list[str]:
    """The extensions a state's or transition's view definition asks for (`extensions` of its
    plain form, of its default and of its rules), in order, each once."""
    if not isinstance(view, dict):
        return []
    rules = view.get("rules")
    entries = [view, view.get("default"), *(rules if isinstance(rules, list) else [])]
    names = [
        name
        for entry in entries
        if isinstance(entry, dict) and isinstance(entry.get("extensions"), list)
        for name in entry["extensions"]
        if isinstance(name, str) and name
    ]
    return list(dict.fromkeys(names))


def _extensions_block(view: Any) -> dict[str, Any]:
    # A view block names the extensions its view asks for, when it asks for any: the client
    # loads them with the data (`functions/data?extensions=...`).
    names = _view_extensions(view)
    return {"extensions": names} if names else {}


def _data_href(base: str, state_view: Any) -> str:
    """The state function's data link: with `?extensions=` for the state view's extensions
    (vNext: the data is loaded with what the view asks for)."""
    names = _view_extensions(state_view)
    href = _href(base, "functions/data")
    return f"{href}?extensions={','.join(names)}" if names else href


def _view_labels(reference: Any, languages: list[str]) -> dict[str, Any]:
    """`label`/`labels` of the view component a state or transition names (none: `{}`)."""
    if not isinstance(reference, dict):
        return {}
    document = engine().components.component("view", reference) or {}
    labels = (document.get("attributes") or {}).get("labels") or []
    if not labels:
        return {}
    return {"label": label_of(labels, languages, str(reference.get("key", ""))), "labels": labels}


def _state_ref(state: StateDef | None, key: str, languages: list[str]) -> dict[str, Any]:
    labels = (state.raw.get("labels") if state else None) or []
    return {
        "key": key,
        "stateType": state.state_type if state else None,
        "stateSubType": state.sub_type if state else None,
        "label": label_of(labels, languages, key),
        "labels": labels,
    }


def data_function(
    instance: InstanceSnapshot, shown: Any = None, *, etag: str | None = None
) -> dict[str, Any]:
    """`functions/data`: `shown` is the data the caller may see (default: as stored)."""
    data = instance.data if shown is None else shown
    return {"data": data, "eTag": etag or instance.entity_etag, "extensions": {}}


T = TypeVar("T")


def function_cached(
    definition: WorkflowDefinition,
    instance: InstanceSnapshot,
    function: str,
    roles: Any,
    variant: tuple[Any, ...],
    compute: Callable[[], T],
) -> T:
    """A built-in function's answer (data, view, schema) from Django's cache while the instance
    is unchanged (seed 001 "Config (Built-in Function Cache)"): kept for the workflow's
    `config.functionCache.ttlSeconds`, else `VNEXT["FUNCTION_CACHE_SECONDS"]` (0: no cache),
    per caller's roles and the query that shapes it. Any write to the instance changes its
    ETag, and an entry made for another ETag is never served."""
    ttl = _function_cache_seconds(definition)
    if ttl <= 0:
        return compute()
    if function == "data" and protection_for(
        instance.domain, instance.workflow_key, instance.workflow_version
    ):
        # The answer may hold fields encrypted at rest in clear (for their exemption roles):
        # never in a cache, which may be a shared server.
        return compute()
    who = json.dumps([sorted(roles) if roles is not None else None, *variant], default=str)
    digest = hashlib.sha256(who.encode()).hexdigest()[:24]
    key = f"vnext:function:{function}:{instance.id}:{digest}"
    cached = cache.get(key)
    if isinstance(cached, tuple) and len(cached) == 2 and cached[0] == instance.etag:
        return cast(T, cached[1])
    value = compute()
    cache.set(key, (instance.etag, value), ttl)
    return value


def _function_cache_seconds(definition: WorkflowDefinition) -> float:
    """The TTL of a workflow's built-in function answers: its positive
    `config.functionCache.ttlSeconds`, else the host default."""
    config = definition.attributes.get("config")
    tuning = config.get("functionCache") if isinstance(config, dict) else None
    ttl = tuning.get("ttlSeconds") if isinstance(tuning, dict) else None
    if isinstance(ttl, int) and not isinstance(ttl, bool) and ttl > 0:
        return float(ttl)
    return float(vnext_setting("FUNCTION_CACHE_SECONDS"))


def _transition_for_function(
    definition: WorkflowDefinition, instance: InstanceSnapshot, key: str | None
) -> TransitionDef | None:
    if not key:
        return None
    transition = definition.transition_for(instance.current_state, key)
    if transition is None:
        raise VNextError(
            Codes.TRANSITION_NOT_FOUND,
            f"no transition {key!r} in state {instance.current_state!r}",
            instance_id=str(instance.id),
        )
    return transition


def _chosen_view(
    definition: WorkflowDefinition,
    instance: InstanceSnapshot,
    transition_key: str | None,
    *,
    roles: frozenset[str] | None = None,
    headers: dict[str, str] | None = None,
    query: dict[str, Any] | None = None,
) -> ViewChoice | None:
    """The view the view function serves: the transition's (`transitionKey`; 404 when the
    state has no such transition), else a wizard state's manual transition's the caller may
    fire, else the state's; a conditional view's first rule that holds for this request (the
    rules see `headers` without credentials and `query`), else its default; the instance's
    SubFlow view override applied. None when there is no view."""
    transition = _transition_for_function(definition, instance, transition_key)
    slot = view_slot(definition, instance, transition, roles)
    return select_view(
        engine().scripts,
        definition,
        instance,
        slot,
        headers=header_deny_list().strip(headers),
        query=query,
        configuration=engine().config.script_configuration,
    )


def view_variant(
    definition: WorkflowDefinition,
    instance: InstanceSnapshot,
    transition_key: str | None,
    *,
    roles: frozenset[str] | None,
    headers: dict[str, str] | None,
    query: dict[str, Any] | None,
) -> tuple[Any, ...]:
    """What a view function answer depends on beside the instance and the caller's roles (its
    function-cache key): the transition and platform asked, and for a conditional view every
    header (no credentials) and query parameter its rules could read."""
    query = query or {}
    variant: tuple[Any, ...] = (transition_key, query.get("platform"))
    transition = _transition_for_function(definition, instance, transition_key)
    if is_conditional(view_slot(definition, instance, transition, roles).definition):
        variant += (sorted(header_deny_list().strip(headers).items()), sorted(query.items()))
    return variant


def view_function(
    definition: WorkflowDefinition,
    instance: InstanceSnapshot,
    transition_key: str | None,
    *,
    roles: frozenset[str] | None = None,
    headers: dict[str, str] | None = None,
    query: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """`functions/view`: the view `chosen_view` picks. 404 when there is none (a conditional
    view none of whose rules holds, without a default, included)."""
    choice = _chosen_view(
        definition, instance, transition_key, roles=roles, headers=headers, query=query
    )
    document = engine().components.component("view", choice.reference) if choice else None
    if document is None:
        transition = _transition_for_function(definition, instance, transition_key)
        slot = view_slot(definition, instance, transition, roles)
        detail = (
            "no view rule holds for this request and the view has no default"
            if choice is None and is_conditional(slot.definition)
            else "no view here"
        )
        raise VNextError(Codes.APP_NOT_FOUND, detail, instance_id=str(instance.id))
    attributes = document.get("attributes") or {}
    return {
        "key": document.get("key"),
        "content": attributes.get("content"),
        "type": attributes.get("type"),
        "display": attributes.get("display"),
        "label": attributes.get("labels") or attributes.get("label"),
    }


def schema_function(
    definition: WorkflowDefinition, instance: InstanceSnapshot, transition_key: str | None
) -> dict[str, Any]:
    """`functions/schema?transitionKey=`: the transition's (or master) schema; 404 if none."""
    transition = _transition_for_function(definition, instance, transition_key)
    reference = schema_reference(
        (transition.raw if transition else definition.attributes).get("schema")
    )
    document = engine().components.component("schema", reference) if reference else None
    if document is None:
        raise VNextError(Codes.APP_NOT_FOUND, "no schema here", instance_id=str(instance.id))
    attributes = document.get("attributes") or {}
    return {
        "key": document.get("key"),
        "type": attributes.get("type"),
        "schema": attributes.get("schema"),
    }
