"""Routes of the instances API: `/api/v1/{domain}/workflows/{workflow}/instances/...`."""

from django.urls import path

from instances.api import (
    custom_function_views,
    function_views,
    human_task_views,
    operator_views,
    read_views,
    run_views,
)

PREFIX = "<str:domain>/workflows/<str:workflow>/instances"
ONE = f"{PREFIX}/<str:instance>"
BATCHES = "<str:domain>/workflows/<str:workflow>/batches"
HUMAN_TASKS = "<str:domain>/functions/human-task"

urlpatterns = [
    path(f"{PREFIX}/start", run_views.InstanceStartView.as_view(), name="instance-start"),
    path(f"{PREFIX}/events", run_views.InstanceEventView.as_view(), name="instance-events"),
    path(PREFIX, read_views.InstanceListView.as_view(), name="instance-list"),
    path(ONE, read_views.InstanceDetailView.as_view(), name="instance-detail"),
    path(
        f"{ONE}/transitions/<str:transition>",
        run_views.InstanceTransitionView.as_view(),
        name="instance-transition",
    ),
    path(f"{ONE}/transitions", read_views.InstanceHistoryView.as_view(), name="instance-history"),
    path(f"{ONE}/retry", run_views.InstanceRetryView.as_view(), name="instance-retry"),
    path(f"{ONE}/suspend", operator_views.InstanceSuspendView.as_view(), name="instance-suspend"),
    path(f"{ONE}/resume", operator_views.InstanceResumeView.as_view(), name="instance-resume"),
    path(f"{ONE}/migrate", operator_views.InstanceMigrateView.as_view(), name="instance-migrate"),
    path(BATCHES, operator_views.BatchCreateView.as_view(), name="batch-create"),
    path(f"{BATCHES}/<str:batch>", operator_views.BatchDetailView.as_view(), name="batch-detail"),
    path(
        f"{BATCHES}/<str:batch>/cancel",
        operator_views.BatchCancelView.as_view(),
        name="batch-cancel",
    ),
    path(
        f"{ONE}/longpoll/ack",
        run_views.InstanceLongPollAckView.as_view(),
        name="instance-longpoll-ack",
    ),
    path(
        f"{ONE}/incidents", read_views.InstanceIncidentListView.as_view(), name="instance-incidents"
    ),
    path(
        f"{ONE}/incidents/active",
        read_views.InstanceActiveIncidentView.as_view(),
        name="instance-incident-active",
    ),
    *[
        path(f"{ONE}/functions/{name}", view.as_view(), name=f"instance-function-{name}")
        for name, view in (
            ("state", function_views.InstanceStateFunctionView),
            ("data", function_views.InstanceDataFunctionView),
            ("view", function_views.InstanceViewFunctionView),
            ("schema", function_views.InstanceSchemaFunctionView),
            ("authorize", function_views.InstanceAuthorizeFunctionView),
        )
    ],
    path(
        f"{ONE}/functions",
        custom_function_views.InstanceFunctionCatalogView.as_view(),
        name="instance-function-catalog",
    ),
    # Any other name: a custom function the workflow declares (the built-ins above win).
    path(
        f"{ONE}/functions/<str:function>",
        custom_function_views.InstanceCustomFunctionView.as_view(),
        name="instance-function",
    ),
    # The human-task inbox (task type 5), before the domain functions' catch-all.
    path(HUMAN_TASKS, human_task_views.HumanTaskInboxView.as_view(), name="human-task-inbox"),
    path(
        f"{HUMAN_TASKS}/<str:task>",
        human_task_views.HumanTaskDetailView.as_view(),
        name="human-task-detail",
    ),
    *[
        path(f"{HUMAN_TASKS}/<str:task>/{action}", view.as_view(), name=f"human-task-{action}")
        for action, view in (
            ("claim", human_task_views.HumanTaskClaimView),
            ("release", human_task_views.HumanTaskReleaseView),
            ("complete", human_task_views.HumanTaskCompleteView),
        )
    ],
    path(
        "<str:domain>/functions",
        custom_function_views.DomainFunctionCatalogView.as_view(),
        name="domain-function-catalog",
    ),
    path(
        "<str:domain>/functions/<str:function>",
        custom_function_views.DomainFunctionView.as_view(),
        name="domain-function",
    ),
]
