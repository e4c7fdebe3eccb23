"""The engine's instance writer: `VNEXT["INSTANCE_WRITER"]` picks one of the two in
`instances.writers`, and the app installs it in the wiring at start-up."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from instances.wiring import engine, writer_install
from instances.writers import RoutingInstanceWriter, ServiceInstanceWriter, instance_writer


def test_the_engine_starts_with_the_routing_writer():
    assert isinstance(engine().tasks.writer, RoutingInstanceWriter)


@pytest.mark.parametrize(
    ("name", "kind"),
    [("routing", RoutingInstanceWriter), ("local", ServiceInstanceWriter), (None, type(None))],
)
def test_the_setting_names_the_writer(settings, name, kind):
    settings.VNEXT = {**getattr(settings, "VNEXT", {}), "INSTANCE_WRITER": name}
    assert isinstance(instance_writer(), kind)


def test_an_unknown_writer_refuses_to_boot(settings):
    settings.VNEXT = {**getattr(settings, "VNEXT", {}), "INSTANCE_WRITER": "remote"}
    with pytest.raises(ImproperlyConfigured, match="INSTANCE_WRITER"):
        instance_writer()


def test_an_installed_writer_reaches_an_engine_built_before():
    built = engine()
    local = ServiceInstanceWriter()
    try:
        writer_install(local)
        assert engine() is not built
        assert engine().tasks.writer is local
    finally:
        writer_install(instance_writer())
    assert isinstance(engine().tasks.writer, RoutingInstanceWriter)
