"""URL routes: admin, API v1, OpenAPI schema and docs page, health."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from vnext.health import health

admin.site.site_header = "vNext operations"
admin.site.site_title = "vNext"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include("workflows.api.urls")),
    path("api/v1/", include("instances.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("health", health, name="health"),
]
