"""The project's admin app configuration: the admin site is `vnext.admin_site.VNextAdminSite`."""

from django.contrib.admin.apps import AdminConfig


class VNextAdminConfig(AdminConfig):
    """django.contrib.admin with the project's site as the default `admin.site`."""

    default_site = "vnext.admin_site.VNextAdminSite"
