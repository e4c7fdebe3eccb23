"""Routes of the instances API: `/api/v1/{domain}/workflows/{workflow}/instances/...`."""

from django.urls import path

from instances.api import views

PREFIX = "<str:domain>/workflows/<str:workflow>/instances"
ONE = f"{PREFIX}/<str:instance>"

urlpatterns = [
    path(f"{PREFIX}/start", views.InstanceStartView.as_view(), name="instance-start"),
    path(f"{PREFIX}/events", views.InstanceEventView.as_view(), name="instance-events"),
    path(PREFIX, views.InstanceListView.as_view(), name="instance-list"),
    path(ONE, views.InstanceDetailView.as_view(), name="instance-detail"),
    path(
        f"{ONE}/transitions/<str:transition>",
        views.InstanceTransitionView.as_view(),
        name="instance-transition",
    ),
    path(f"{ONE}/transitions", views.InstanceHistoryView.as_view(), name="instance-history"),
    path(f"{ONE}/retry", views.InstanceRetryView.as_view(), name="instance-retry"),
    path(
        f"{ONE}/longpoll/ack",
        views.InstanceLongPollAckView.as_view(),
        name="instance-longpoll-ack",
    ),
    path(f"{ONE}/incidents", views.InstanceIncidentListView.as_view(), name="instance-incidents"),
    path(
        f"{ONE}/incidents/active",
        views.InstanceActiveIncidentView.as_view(),
        name="instance-incident-active",
    ),
    *[
        path(f"{ONE}/functions/{name}", view.as_view(), name=f"instance-function-{name}")
        for name, view in (
            ("state", views.InstanceStateFunctionView),
            ("data", views.InstanceDataFunctionView),
            ("view", views.InstanceViewFunctionView),
            ("schema", views.InstanceSchemaFunctionView),
            ("authorize", views.InstanceAuthorizeFunctionView),
        )
    ],
    path(
        f"{ONE}/functions",
        views.InstanceFunctionCatalogView.as_view(),
        name="instance-function-catalog",
    ),
    # Any other name: a custom function the workflow declares (the built-ins above win).
    path(
        f"{ONE}/functions/<str:function>",
        views.InstanceCustomFunctionView.as_view(),
        name="instance-function",
    ),
    path(
        "<str:domain>/functions",
        views.DomainFunctionCatalogView.as_view(),
        name="domain-function-catalog",
    ),
    path(
        "<str:domain>/functions/<str:function>",
        views.DomainFunctionView.as_view(),
        name="domain-function",
    ),
]
