"""The bodies of the instances API as the OpenAPI document describes them (API.md sections 1-3).

The views build their answers with `instances.answers` and the selectors; these serializers only
type them for clients (`extend_schema`), so a generated client knows every field."""

from __future__ import annotations

from rest_framework import serializers

STATUSES = ["A", "B", "C", "F", "P"]


class Free(serializers.JSONField):
    """Any JSON value (instance data, a script's answer)."""


class StartBodySerializer(serializers.Serializer):
    """The standard envelope; a body without a top-level `attributes` is taken as the data
    itself (`x-vnext-payload-mode` forces either reading)."""

    key = serializers.CharField(required=False, allow_null=True, max_length=100)
    tags = serializers.ListField(child=serializers.CharField(), required=False, allow_null=True)
    stage = serializers.CharField(required=False, allow_null=True, allow_blank=True, max_length=120)
    attributes = serializers.DictField(
        required=False, allow_null=True, help_text="The instance data (null: none)"
    )


class TransitionBodySerializer(serializers.Serializer):
    """The transition's data (standard envelope or free data)."""

    key = serializers.CharField(required=False, allow_null=True, max_length=100)
    stage = serializers.CharField(required=False, allow_null=True, allow_blank=True, max_length=120)
    attributes = serializers.DictField(required=False)


class RetryBodySerializer(serializers.Serializer):
    """Data merged into the instance before the faulted transition runs again."""

    attributes = serializers.DictField(required=False)


class AcceptedSerializer(serializers.Serializer):
    """`sync=false`: the work was accepted as a job."""

    id = serializers.UUIDField()
    status = serializers.ChoiceField(choices=STATUSES)
    retriedTransitionId = serializers.UUIDField(required=False, allow_null=True)


class ErrorBlockSerializer(serializers.Serializer):
    """Why the run faulted the instance (status F)."""

    errorCode = serializers.CharField()
    detail = serializers.CharField()
    incident = serializers.DictField()


class EnvelopeSerializer(serializers.Serializer):
    """The instance after a sync start, transition, retry or acknowledgement."""

    id = serializers.UUIDField()
    key = serializers.CharField(allow_null=True)
    status = serializers.ChoiceField(choices=STATUSES)
    attributes = Free(help_text="The data the caller may see")
    eTag = serializers.CharField()
    entityEtag = serializers.CharField()
    extensions = serializers.DictField()
    retriedTransitionId = serializers.UUIDField(required=False, allow_null=True)
    error = ErrorBlockSerializer(required=False)


class IncidentBlockSerializer(serializers.Serializer):
    hasActiveIncident = serializers.BooleanField()
    active = serializers.DictField(allow_null=True)
    history = serializers.DictField()


class MetadataSerializer(serializers.Serializer):
    currentState = serializers.CharField()
    effectiveState = serializers.CharField()
    status = serializers.ChoiceField(choices=STATUSES)
    effectiveStatus = serializers.ChoiceField(choices=STATUSES)
    effectiveStateType = serializers.CharField()
    effectiveStateSubType = serializers.CharField()
    createdAt = serializers.DateTimeField(allow_null=True)
    modifiedAt = serializers.DateTimeField(allow_null=True)
    completedAt = serializers.DateTimeField(allow_null=True)
    duration = serializers.FloatField(allow_null=True)
    createdBy = serializers.CharField(allow_blank=True)
    modifiedBy = serializers.CharField(allow_blank=True)
    stage = serializers.CharField(allow_null=True, allow_blank=True)
    dataVersion = serializers.CharField()
    incident = IncidentBlockSerializer()


class InstanceSerializer(serializers.Serializer):
    """One instance with its metadata."""

    id = serializers.UUIDField()
    key = serializers.CharField(allow_null=True)
    flow = serializers.CharField()
    domain = serializers.CharField()
    flowVersion = serializers.CharField()
    eTag = serializers.CharField()
    entityEtag = serializers.CharField()
    tags = serializers.ListField(child=serializers.CharField())
    metadata = MetadataSerializer()
    attributes = Free()
    extensions = serializers.DictField()


class LinksSerializer(serializers.Serializer):
    """Page links: strings always, `""` where there is no such page (as vNext sends them)."""

    self = serializers.CharField(help_text="this page")
    first = serializers.CharField(help_text="the first page")
    next = serializers.CharField(allow_blank=True, help_text='the next page; "" on the last')
    prev = serializers.CharField(allow_blank=True, help_text='the previous page; "" on the first')


class InstancePageSerializer(serializers.Serializer):
    """A page of instances, newest first unless `sort` says otherwise."""

    items = InstanceSerializer(many=True)
    page = serializers.IntegerField()
    pageSize = serializers.IntegerField()
    hasNext = serializers.BooleanField()
    nextCursor = serializers.CharField(
        allow_blank=True, help_text='the `cursor` of the next page; "" on the last'
    )
    links = LinksSerializer()


# One group of a `groupBy` answer; its aggregations are named like builtins, hence the mapping.
GroupSerializer = type(
    "GroupSerializer",
    (serializers.Serializer,),
    {
        "__doc__": "One group: its name (the list of values for `fields`) and aggregations.",
        "name": Free(allow_null=True, help_text="the grouped value; a list for groupBy.fields"),
        "count": serializers.IntegerField(required=False),
        **{
            name: Free(required=False, allow_null=True, help_text=f"{name} of the numbers")
            for name in ("sum", "avg", "min", "max")
        },
    },
)


class GroupsSerializer(serializers.Serializer):
    """The answer to a `groupBy`: one entry per group, ordered by name."""

    groups = GroupSerializer(many=True)


class HistoryRowSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    transitionKey = serializers.CharField()
    fromState = serializers.CharField(allow_blank=True)
    toState = serializers.CharField(allow_blank=True)
    effectiveState = serializers.CharField(allow_blank=True)
    effectiveStateType = serializers.CharField(allow_blank=True)
    effectiveStateSubType = serializers.CharField(allow_blank=True)
    triggerType = serializers.IntegerField(allow_null=True)
    stage = serializers.CharField(allow_null=True, allow_blank=True)
    status = serializers.CharField()
    actor = serializers.CharField(allow_blank=True)
    startedAt = serializers.DateTimeField(allow_null=True)
    finishedAt = serializers.DateTimeField(allow_null=True)
    errorCode = serializers.CharField(allow_null=True)
    errorMessage = serializers.CharField(allow_null=True)


class HistorySerializer(serializers.Serializer):
    """Every transition attempt, oldest first."""

    items = HistoryRowSerializer(many=True)


class IncidentSerializer(serializers.Serializer):
    """An incident: a fault of the instance, open until retried or resolved."""

    id = serializers.IntegerField()
    errorCode = serializers.CharField()
    message = serializers.CharField(allow_blank=True)
    state = serializers.CharField(allow_blank=True)
    transitionKey = serializers.CharField(allow_blank=True)
    taskKey = serializers.CharField(allow_null=True)
    step = serializers.CharField(allow_null=True)
    attempt = serializers.IntegerField(allow_null=True)
    layer = serializers.CharField(allow_blank=True)
    boundaryAction = serializers.CharField(allow_null=True)
    boundaryLevel = serializers.CharField(allow_null=True)
    resolved = serializers.BooleanField()
    resolution = serializers.CharField(allow_null=True)
    resolvedBy = serializers.CharField(allow_null=True)
    resolvedAt = serializers.DateTimeField(allow_null=True)
    createdAt = serializers.DateTimeField()
    href = serializers.CharField(required=False)


class IncidentPageSerializer(serializers.Serializer):
    hasActiveIncident = serializers.BooleanField()
    items = IncidentSerializer(many=True)
    page = serializers.IntegerField()
    pageSize = serializers.IntegerField()
    hasNext = serializers.BooleanField()


class StateRefSerializer(serializers.Serializer):
    key = serializers.CharField()
    stateType = serializers.IntegerField(allow_null=True)
    stateSubType = serializers.IntegerField(allow_null=True)
    label = serializers.CharField()  # type: ignore[assignment]
    labels = serializers.ListField(child=serializers.DictField())


class CronScheduleSerializer(serializers.Serializer):
    """A cron timer's schedule; its next occurrence is the `executeAtUtc` beside it."""

    expression = serializers.CharField(help_text="Five-field cron expression, e.g. '0 9 * * 1-5'")
    timeZone = serializers.CharField(help_text="IANA time zone the expression is read in")


class OfferedTransitionSerializer(serializers.Serializer):
    name = serializers.CharField()
    href = serializers.CharField()
    kind = serializers.CharField(required=False)
    label = serializers.CharField(required=False)  # type: ignore[assignment]
    labels = serializers.ListField(child=serializers.DictField(), required=False)
    target = StateRefSerializer(required=False)
    view = serializers.DictField(required=False)
    schema = serializers.DictField(required=False)
    executeAtUtc = serializers.DateTimeField(required=False)
    cron = CronScheduleSerializer(required=False)


class InteractionSerializer(serializers.Serializer):
    terminateLongPoll = serializers.BooleanField()
    fallbackTimeoutSeconds = serializers.IntegerField()
    ack = serializers.DictField(required=False)


class StateFunctionSerializer(serializers.Serializer):
    """Where the instance is (its leaf, through an open subflow chain) and what the caller may
    do next."""

    data = serializers.DictField()  # type: ignore[assignment]
    view = serializers.DictField()
    state = serializers.CharField(help_text="The state key, or its alias for the caller's roles")
    label = serializers.CharField()  # type: ignore[assignment]
    labels = serializers.ListField(child=serializers.DictField())
    status = serializers.ChoiceField(choices=STATUSES)
    stateType = serializers.CharField()
    stateSubType = serializers.CharField()
    activeCorrelations = serializers.ListField(child=serializers.DictField())
    transitions = OfferedTransitionSerializer(many=True)
    incident = IncidentBlockSerializer()
    interaction = InteractionSerializer(required=False)
    timeout = serializers.DictField(required=False)
    eTag = serializers.CharField()


class DataFunctionSerializer(serializers.Serializer):
    """The instance data the caller may see (master schema `x-roles`, `x-masking`)."""

    data = Free(  # type: ignore[assignment]
        allow_null=True, help_text="null: the asked data version does not exist"
    )
    eTag = serializers.CharField()
    extensions = serializers.DictField()


class ViewFunctionSerializer(serializers.Serializer):
    key = serializers.CharField(allow_null=True)
    content = Free(allow_null=True)
    type = Free(allow_null=True)
    display = serializers.CharField(allow_null=True)
    label = Free(allow_null=True)  # type: ignore[assignment]


class SchemaFunctionSerializer(serializers.Serializer):
    key = serializers.CharField(allow_null=True)
    type = serializers.CharField(allow_null=True)
    schema = Free(allow_null=True)


class AuthorizeSerializer(serializers.Serializer):
    """The decision (also the body of the 403)."""

    allowed = serializers.BooleanField()


class EventOutcomeSerializer(serializers.Serializer):
    """What an event did (its work is accepted as jobs)."""

    eventId = serializers.CharField(help_text="the CloudEvent id, ce-id / x-event-id, or a hash")
    matched = serializers.IntegerField(help_text="instances started or moved")
    instances = serializers.ListField(child=serializers.UUIDField())
    duplicate = serializers.BooleanField(help_text="seen before: nothing changed")


class FunctionSchemaContractSerializer(serializers.Serializer):
    """A function's input or output schema (the entry its rules chose for this caller)."""

    key = serializers.CharField(allow_null=True)
    version = serializers.CharField(allow_null=True)
    type = Free(allow_null=True)
    schema = Free(allow_null=True, help_text="the JSON Schema")


class FunctionViewContractSerializer(serializers.Serializer):
    """A function's input or output view (the entry its rules chose for this caller)."""

    key = serializers.CharField(allow_null=True)
    version = serializers.CharField(allow_null=True)
    content = Free(allow_null=True)
    type = Free(allow_null=True)
    display = serializers.CharField(allow_null=True)
    label = Free(allow_null=True)  # type: ignore[assignment]
    loadData = serializers.BooleanField()


class FunctionLabelSerializer(serializers.Serializer):
    label = serializers.CharField()  # type: ignore[assignment]
    language = serializers.CharField()


class FunctionCatalogItemSerializer(serializers.Serializer):
    """A function the caller may run: how to call it and its contracts (null: none declared,
    or no rule of the slot holds for this caller)."""

    key = serializers.CharField()
    domain = serializers.CharField()
    version = serializers.CharField()
    scope = serializers.ChoiceField(choices=["I", "F", "D"])
    verbs = serializers.ListField(
        child=serializers.ChoiceField(choices=["GET", "POST", "PATCH", "DELETE"]),
        help_text="the verbs it answers (all four when the function declares none)",
    )
    rawResponse = serializers.BooleanField()
    cacheable = serializers.BooleanField()
    labels = FunctionLabelSerializer(many=True)
    href = serializers.CharField(help_text="where to call it")
    inputSchema = FunctionSchemaContractSerializer(allow_null=True)
    outputSchema = FunctionSchemaContractSerializer(allow_null=True)
    inputView = FunctionViewContractSerializer(allow_null=True)
    outputView = FunctionViewContractSerializer(allow_null=True)


class FunctionCatalogSerializer(serializers.Serializer):
    """The functions the caller may run here."""

    items = FunctionCatalogItemSerializer(many=True)


class ReasonBodySerializer(serializers.Serializer):
    """Suspend or resume: why, kept in the history and the audit."""

    reason = serializers.CharField(required=False, allow_blank=True)


class MigrateBodySerializer(serializers.Serializer):
    """Migrate an instance to another published version of its workflow."""

    targetVersion = serializers.CharField()
    stateMapping = serializers.DictField(
        child=serializers.CharField(), required=False, help_text="old state key -> new state key"
    )


class BatchBodySerializer(serializers.Serializer):
    """A batch operation over the instances a filter matches."""

    operation = serializers.ChoiceField(choices=["retry", "cancel", "suspend", "resume", "migrate"])
    filter = serializers.JSONField(
        required=False, help_text="the list API's filter: a JSON filter, a string, or a list"
    )
    dryRun = serializers.BooleanField(required=False, default=False)
    reason = serializers.CharField(required=False, help_text="cancel, suspend, resume")
    attributes = serializers.DictField(required=False, help_text="retry: the correction")
    targetVersion = serializers.CharField(required=False, help_text="migrate: required")
    stateMapping = serializers.DictField(
        child=serializers.CharField(), required=False, help_text="migrate"
    )
