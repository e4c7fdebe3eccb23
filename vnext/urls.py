"""URL routes: admin, API v1, OpenAPI schema and docs page, health.

Under `/api/v1` nothing falls through to Django's HTML 404: a path no API route matches answers
the problem+json 404 (`App:900004`); a known path with a method it does not take answers 405
(`App:900005`) from its view. Other paths keep Django's behaviour.
"""

from django.contrib import admin
from django.templatetags.static import static
from django.urls import include, path, re_path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from instances.api.run_views import SubflowForwardView
from vnext.exception_handler import ApiNotFoundView
from vnext.health import health
from vnext.observability import metrics_view

urlpatterns = [
    # The site's home is the operations dashboard (the admin's index): "View site" lands there.
    path("", RedirectView.as_view(pattern_name="admin:index"), name="home"),
    path(
        "favicon.ico",
        RedirectView.as_view(url=static("vnext/favicon.svg"), permanent=True),
        name="favicon",
    ),
    path("admin/", admin.site.urls),
    path("api/v1/", include("workflows.api.urls")),
    path("api/v1/", include("instances.api.urls")),
    re_path(r"^api/v1(?:/.*)?$", ApiNotFoundView.as_view(), name="api-not-found"),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("health", health, name="health"),
    path("metrics", metrics_view, name="metrics"),
    path(
        "internal/<str:domain>/instances/<str:instance>/subflow-forward",
        SubflowForwardView.as_view(),
        name="internal-subflow-forward",
    ),
]
