"""The instances app."""

from django.apps import AppConfig
from django.core.exceptions import ImproperlyConfigured
from django.db.models.signals import post_delete, post_save

from instances.bindings import SmtpSender
from instances.engine.egress import configure_egress
from instances.engine.script_pool import configure_pool
from instances.engine.targets import configure_targets, install_binding_sender
from instances.field_encryption import key_problem
from vnext.conf import egress_policy, named_targets, script_pool_settings, vnext_setting
from vnext.observability import configure_tracing


class InstancesConfig(AppConfig):
    """Instances, transitions, task journal, jobs and the engine."""

    name = "instances"
    verbose_name = "Workflow instances"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Check the settings a process cannot run with (fan-out limit, encryption keys, egress
        allow-list), put the egress policy in force, configure the script worker pool
        (started on first use, or by `vnext_run` and the Celery worker at start-up), connect what
        forgets cached components when one is published, give the engine its instance writer
        (`VNEXT["INSTANCE_WRITER"]`) and the job runner the batch job's handler."""
        limit = vnext_setting("FAN_OUT_MAX_CONCURRENT_ITEMS")
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            # A limit of 0 would stall every fan-out batch at its first item: refuse to boot.
            raise ImproperlyConfigured(
                f"VNEXT['FAN_OUT_MAX_CONCURRENT_ITEMS'] (VNEXT_FAN_OUT_MAX_CONCURRENT_ITEMS) "
                f"must be an integer >= 1, not {limit!r}"
            )
        problem = key_problem(vnext_setting("ENCRYPTION_KEYS"))
        if problem is not None:
            # A malformed key would fail the first write of an encrypted field: refuse to boot.
            raise ImproperlyConfigured(problem)
        try:
            egress_policy()
        except ValueError as exc:
            # A malformed allow-list entry would refuse (or fail) every outgoing call.
            raise ImproperlyConfigured(
                f"VNEXT_EGRESS_ALLOW_HOSTS / VNEXT_EGRESS_ALLOW_CIDRS: a malformed entry: {exc}"
            ) from exc
        configure_egress(egress_policy)
        # The named services, endpoints and bindings of task types 1-3: an entry that cannot be
        # used (a binding kind this runtime does not provide) would fail every task naming it.
        problems = named_targets().problems
        if problems:
            raise ImproperlyConfigured("; ".join(problems.values()))
        configure_targets(named_targets)
        install_binding_sender("smtp", SmtpSender())
        configure_pool(script_pool_settings())
        # What is cached of published components is forgotten when a Component row changes.
        from instances.extensions import extensions_forget_on_write
        from instances.registry import newest_forget_on_write
        from workflows.models import Component

        for receiver, name in (
            (newest_forget_on_write, "newest"),
            (extensions_forget_on_write, "extensions"),
        ):
            post_save.connect(receiver, sender=Component, dispatch_uid=f"{name}_saved")
            post_delete.connect(receiver, sender=Component, dispatch_uid=f"{name}_deleted")
        # The engine's writer calls the instance services, above the wiring: installed from here.
        from instances.wiring import writer_install
        from instances.writers import instance_writer

        writer_install(instance_writer())
        # The batch job's handler sits above the job runner (it calls the operations).
        from instances.batches import batch_job_register

        batch_job_register()
        # Trace spans leave the process only when an OTLP endpoint is configured.
        configure_tracing()
