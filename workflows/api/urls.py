"""Routes of the definitions API."""

from django.urls import path

from workflows.api import views

urlpatterns = [
    path("definitions/publish", views.DefinitionPublishView.as_view(), name="definition-publish"),
    path(
        "definitions/<str:kind>/<str:domain>/<str:key>",
        views.DefinitionDetailView.as_view(),
        name="definition-detail",
    ),
    path(
        "definitions/<str:kind>/<str:domain>",
        views.DefinitionListView.as_view(),
        name="definition-list",
    ),
]
