"""The `order` workflow (issue 32) in process, against the libraries a user would pick instead.

start -> `submit` (manual, writes `amount`) -> `approve` (manual, writes `decision`) -> a final
state; WORKFLOWS workflows per contender in ROUNDS interleaved rounds, same PostgreSQL (the bench
database), one connection each, every contender persisting what it normally persists:

- raw SQL floor: psycopg, autocommit; start = one CTE that inserts the order row and its start
  history row; each step = one CTE that moves the state (guarded by the state it leaves), merges
  the step's field into the `data` jsonb and inserts the history row: 3 statements a workflow;
- django-fsm-2: `FSMField` + `ConcurrentTransitionMixin` model, the data as columns, a
  django-fsm-log style `StateLog` row per transition, each step in `transaction.atomic()`;
- viewflow 2.4: `StartHandle` -> two human `View` tasks (assigned on creation) -> `End`, with
  `SelectForUpdateLock`; a step runs what viewflow's task view runs on POST, without HTTP:
  lock, load the task, `activation.start()`, write `process.data`, `activation.execute()`;
- SpiffWorkflow 3.1.2: a BPMN process (start event, two user tasks, end event) parsed once from
  inline XML; a step loads the row (`SELECT ... FOR UPDATE`), deserializes the workflow, runs
  the ready user task with its data, serializes the workflow back into the row and inserts a
  history row, in `transaction.atomic()`;
- this project: the published `bench-order` workflow through `instance_start` /
  `instance_transition`, the step's field in the request attributes as a client sends it;
- this project + scripts: the same workflow with one script task (type 7) on start, submit and
  approve, its mapping computing a field from the step's input in the script worker pool (one
  worker round trip per step); set beside django-fsm-2 (issue 32: at least 1x).

Statements per step are counted in a separate, untimed pass: Django's `CaptureQueriesContext`
for the Django contenders (it lists the BEGIN and COMMIT of a transaction too, since Django 4.2),
the floor's own count (autocommit: no BEGIN/COMMIT). During the timed rounds an execute wrapper
adds up the time the Django contenders spend inside `cursor.execute` (not COMMIT): "sql ms".

`BENCH_PROFILE=1` adds a cProfile of PROFILE_WORKFLOWS workflows of this project (top 25 by
internal time); `BENCH_PROFILE=scripts`, of this project + scripts.

SpiffWorkflow logs every task state change at INFO; its loggers are set to WARNING here, as an
application would, so its figures do not include formatting the project's JSON log lines.
"""

from __future__ import annotations

import copy
import cProfile
import logging
import os
import pstats
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from django.conf import settings
from django.core.management import call_command
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from bench.database import bench_database_url, libpq_url
from bench.summary import record
from bench.timing import percentile
from bench.transition_workflows import (
    DOMAIN,
    ORDER,
    ORDER_SCRIPTS,
    TASK_DOCUMENT,
    TASK_KEY,
    order_document,
)
from instances.models import Instance
from instances.services import RequestInfo, instance_start, instance_transition
from workflows.models import Component
from workflows.services import component_publish

WORKFLOWS = 300
ROUNDS = 5  # WORKFLOWS / ROUNDS workflows per contender per round
WARMUP = 20
PROFILE_WORKFLOWS = 200
STEPS = ("start", "submit", "approve")
AMOUNT = 250
DECISION = "approved"
ACTOR = "bench"
INFO = RequestInfo(actor=ACTOR)
# Issue 32's "Must show", in process: this project's workflows/s over each contender's.
TARGETS = {
    "raw SQL floor": 0.5,
    "django-fsm-2": 1.5,
    "SpiffWorkflow": 2.0,
    "viewflow": 4.0,
}
STATEMENT_TARGET = 6
# With a script task on each step: this project's workflows/s over django-fsm-2's.
SCRIPTS_TARGET = 1.0

SPIFF_BPMN = """<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    id="bench-order-definitions" targetNamespace="http://bpmn.io/schema/bpmn">
  <bpmn:process id="order" isExecutable="true">
    <bpmn:startEvent id="start"><bpmn:outgoing>to_submit</bpmn:outgoing></bpmn:startEvent>
    <bpmn:sequenceFlow id="to_submit" sourceRef="start" targetRef="submit"/>
    <bpmn:userTask id="submit" name="Submit">
      <bpmn:incoming>to_submit</bpmn:incoming><bpmn:outgoing>to_approve</bpmn:outgoing>
    </bpmn:userTask>
    <bpmn:sequenceFlow id="to_approve" sourceRef="submit" targetRef="approve"/>
    <bpmn:userTask id="approve" name="Approve">
      <bpmn:incoming>to_approve</bpmn:incoming><bpmn:outgoing>to_end</bpmn:outgoing>
    </bpmn:userTask>
    <bpmn:sequenceFlow id="to_end" sourceRef="approve" targetRef="end"/>
    <bpmn:endEvent id="end"><bpmn:incoming>to_end</bpmn:incoming></bpmn:endEvent>
  </bpmn:process>
</bpmn:definitions>
"""


# --- setup --------------------------------------------------------------------------------------


def prepare_database() -> None:
    """Migrate the bench database (viewflow's tables included), start every table the suite
    writes empty, create the baselines' tables, publish the `order` workflow."""
    name = str(settings.DATABASES["default"]["NAME"])
    if connection.vendor != "postgresql" or name == "vnext_test":
        raise SystemExit(f"the order suite needs its own PostgreSQL database, not {name!r}")
    call_command("migrate", interactive=False, verbosity=0)
    from viewflow.workflow.models import Process

    from bench.fsm_library.models import FsmWorkflowOrder, FsmWorkflowOrderLog
    from bench.order_peers.models import SpiffOrder, SpiffOrderHistory

    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {Instance._meta.db_table} CASCADE")
        cursor.execute(f"TRUNCATE {Process._meta.db_table} CASCADE")
        cursor.execute(
            "DROP TABLE IF EXISTS bench_order_raw_history, bench_order_raw, "
            "bench_fsmlib_wf_log, bench_fsmlib_wf_order, bench_spiff_history, bench_spiff_order"
        )
        cursor.execute(
            "CREATE TABLE bench_order_raw (id bigserial PRIMARY KEY, state text NOT NULL, "
            "data jsonb NOT NULL DEFAULT '{}', created_at timestamptz NOT NULL DEFAULT now())"
        )
        cursor.execute(
            "CREATE TABLE bench_order_raw_history (id bigserial PRIMARY KEY, "
            "order_id bigint NOT NULL REFERENCES bench_order_raw (id), "
            "transition text NOT NULL, from_state text NOT NULL, to_state text NOT NULL, "
            "actor text NOT NULL, at timestamptz NOT NULL DEFAULT now())"
        )
    with connection.schema_editor() as editor:
        for model in (FsmWorkflowOrder, FsmWorkflowOrderLog, SpiffOrder, SpiffOrderHistory):
            editor.create_model(model)
    Component.objects.filter(domain=DOMAIN, key__in=(ORDER, ORDER_SCRIPTS, TASK_KEY)).delete()
    for document in (TASK_DOCUMENT, order_document(), order_document(with_scripts=True)):
        result = component_publish(document=copy.deepcopy(document), published_by=ACTOR)
        if result.status != "published":
            raise RuntimeError(f"{result.ref}: {result.status}")


# --- contenders: start() returns a handle; submit(handle), approve(handle) ---------------------


class RawFloor:
    """psycopg, autocommit: one statement per step."""

    name = "raw SQL floor"
    django = False
    statements = {"start": 1, "submit": 1, "approve": 1}

    def __init__(self) -> None:
        self.conn = psycopg.connect(libpq_url(bench_database_url()), autocommit=True)

    def start(self) -> int:
        """The order row and its start history row, in one CTE."""
        row = self.conn.execute(
            "WITH created AS (INSERT INTO bench_order_raw (state) VALUES ('draft') RETURNING id) "
            "INSERT INTO bench_order_raw_history (order_id, transition, from_state, to_state, "
            "actor) SELECT id, 'start', '', 'draft', %s FROM created RETURNING order_id",
            (ACTOR,),
        ).fetchone()
        if row is None:
            raise RuntimeError("raw floor: start inserted nothing")
        return int(row[0])

    def _move(self, order_id: int, key: str, source: str, target: str, data: str) -> None:
        cursor = self.conn.execute(
            "WITH moved AS (UPDATE bench_order_raw SET state = %s, data = data || %s::jsonb "
            "WHERE id = %s AND state = %s RETURNING id) "
            "INSERT INTO bench_order_raw_history (order_id, transition, from_state, to_state, "
            "actor) SELECT id, %s, %s, %s, %s FROM moved",
            (target, data, order_id, source, key, source, target, ACTOR),
        )
        if cursor.rowcount != 1:
            raise RuntimeError(f"raw floor: {key} found order {order_id} not in {source}")

    def submit(self, order_id: int) -> None:
        """draft -> submitted, merging `amount`."""
        self._move(order_id, "submit", "draft", "submitted", f'{{"amount": {AMOUNT}}}')

    def approve(self, order_id: int) -> None:
        """submitted -> approved, merging `decision`."""
        self._move(order_id, "approve", "submitted", "approved", f'{{"decision": "{DECISION}"}}')

    def close(self) -> None:
        """Close the psycopg connection."""
        self.conn.close()


class FsmLibrary:
    """django-fsm-2 as documented, with a django-fsm-log style row per transition."""

    name = "django-fsm-2 4.2.4"
    django = True

    def __init__(self) -> None:
        from bench.fsm_library.models import FsmWorkflowOrder, FsmWorkflowOrderLog

        # Any: the type checker's Django settings do not install this bench-only app.
        self.model: Any = FsmWorkflowOrder
        self.log: Any = FsmWorkflowOrderLog

    def start(self) -> int:
        """Create the order (django-fsm-log logs transitions, not creation)."""
        return int(self.model.objects.create().pk)

    def _step(self, order_id: int, name: str, **data: Any) -> None:
        with transaction.atomic():
            order = self.model.objects.get(pk=order_id)
            source = order.state
            getattr(order, name)(**data)
            order.save()
            self.log.objects.create(
                order=order, transition=name, source_state=source, state=order.state, by=ACTOR
            )

    def submit(self, order_id: int) -> None:
        """new -> submitted."""
        self._step(order_id, "submit", amount=AMOUNT)

    def approve(self, order_id: int) -> None:
        """submitted -> approved."""
        self._step(order_id, "approve", decision=DECISION)


class SpiffLibrary:
    """SpiffWorkflow 3.1.2: the workflow JSON-serialized into its row after every step."""

    name = "SpiffWorkflow 3.1.2"
    django = True

    def __init__(self) -> None:
        from SpiffWorkflow.bpmn.parser import BpmnParser
        from SpiffWorkflow.bpmn.serializer import BpmnWorkflowSerializer
        from SpiffWorkflow.bpmn.workflow import BpmnWorkflow
        from SpiffWorkflow.util.task import TaskState

        from bench.order_peers.models import SpiffOrder, SpiffOrderHistory

        parser = BpmnParser()
        parser.add_bpmn_str(SPIFF_BPMN.encode(), filename="order.bpmn")
        self.spec = parser.get_spec("order")
        self.serializer = BpmnWorkflowSerializer()
        self.workflow_class = BpmnWorkflow
        self.ready = TaskState.READY
        self.model: Any = SpiffOrder
        self.history: Any = SpiffOrderHistory

    def _waiting_on(self, workflow: Any) -> str:
        if workflow.is_completed():
            return "done"
        task = workflow.get_next_task(state=self.ready, manual=True)
        return str(task.task_spec.name)

    def start(self) -> int:
        """A new workflow, run to its first user task, saved with a history row."""
        workflow = self.workflow_class(self.spec)
        workflow.do_engine_steps()
        with transaction.atomic():
            order = self.model.objects.create(
                waiting_on=self._waiting_on(workflow),
                serialization=self.serializer.serialize_json(workflow),
            )
            self.history.objects.create(order=order, task="start", actor=ACTOR)
        return int(order.pk)

    def _step(self, order_id: int, name: str, **data: Any) -> None:
        with transaction.atomic():
            order = self.model.objects.select_for_update().get(pk=order_id)
            workflow = self.serializer.deserialize_json(order.serialization)
            task = workflow.get_next_task(state=self.ready, manual=True)
            if task is None or task.task_spec.name != name:
                raise RuntimeError(f"SpiffWorkflow: order {order_id} is not waiting on {name}")
            task.set_data(**data)
            task.run()
            workflow.do_engine_steps()
            order.waiting_on = self._waiting_on(workflow)
            order.serialization = self.serializer.serialize_json(workflow)
            order.save(update_fields=["waiting_on", "serialization"])
            self.history.objects.create(order=order, task=name, actor=ACTOR)

    def submit(self, order_id: int) -> None:
        """Complete the `submit` user task with `amount`."""
        self._step(order_id, "submit", amount=AMOUNT)

    def approve(self, order_id: int) -> None:
        """Complete the `approve` user task with `decision`; the workflow completes."""
        self._step(order_id, "approve", decision=DECISION)


class ViewflowLibrary:
    """viewflow 2.4: StartHandle, two human View tasks, End; SelectForUpdateLock."""

    name = "viewflow 2.4.0"
    django = True

    def __init__(self) -> None:
        from viewflow.workflow.models import Task
        from viewflow.workflow.status import STATUS

        from bench.order_peers.flows import OrderFlow

        self.flow: Any = OrderFlow
        self.task_model: Any = Task
        self.open = [STATUS.NEW, STATUS.ASSIGNED]

    def start(self) -> int:
        """Start a process from code; viewflow creates the start task and the `submit` task."""
        return int(self.flow.start.run().pk)

    def _step(self, process_id: int, node: Any, **data: Any) -> None:
        # What viewflow's task view runs on POST (flow/utils.py wrap_task_view, then
        # UpdateProcessView.form_valid), without the request: lock, load the task, start it,
        # save the process with the form's data, execute (completes it, activates the next).
        with self.flow.lock(process_id), transaction.atomic():
            task = self.task_model.objects.get(
                process_id=process_id, flow_task=node, status__in=self.open
            )
            activation = node.activation_class(task)
            activation.start(None)
            process = activation.process
            process.data.update(data)
            process.save()
            activation.execute()

    def submit(self, process_id: int) -> None:
        """Complete the `submit` human task with `amount`."""
        self._step(process_id, self.flow.submit, amount=AMOUNT)

    def approve(self, process_id: int) -> None:
        """Complete the `approve` human task with `decision`; the process ends."""
        self._step(process_id, self.flow.approve, decision=DECISION)


class ThisProject:
    """`instance_start` / `instance_transition`, in process, as the API views call them."""

    name = "this project"
    django = True
    workflow = ORDER

    def start(self) -> str:
        """Start a `bench-order` instance (it waits in `draft`)."""
        outcome = instance_start(
            domain=DOMAIN, workflow=self.workflow, body={"attributes": {}}, info=INFO
        )
        return str(outcome.instance.id)

    def _step(self, ref: str, key: str, attributes: dict[str, Any], state: str) -> None:
        outcome = instance_transition(
            domain=DOMAIN,
            workflow=self.workflow,
            ref=ref,
            transition_key=key,
            body={"attributes": attributes},
            info=INFO,
        )
        if outcome.instance.current_state != state:
            raise RuntimeError(f"this project: {key} ended in {outcome.instance.current_state}")

    def submit(self, ref: str) -> None:
        """draft -> submitted with `amount`."""
        self._step(ref, "submit", {"amount": AMOUNT}, "submitted")

    def approve(self, ref: str) -> None:
        """submitted -> approved (Final) with `decision`."""
        self._step(ref, "approve", {"decision": DECISION}, "approved")


class ThisProjectWithScripts(ThisProject):
    """The same, on `bench-order-scripts`: each step also runs one script task in the pool."""

    name = "this project + scripts"
    workflow = ORDER_SCRIPTS


# --- measuring ----------------------------------------------------------------------------------


@dataclass
class Figures:
    """One contender's per-step nanoseconds, workflow seconds and statements per step."""

    name: str
    samples: dict[str, list[int]] = field(default_factory=lambda: {s: [] for s in STEPS})
    seconds: float = 0.0
    statements: dict[str, int] = field(default_factory=dict)
    listing: dict[str, list[str]] = field(default_factory=dict)
    sql_seconds: float = 0.0

    def __call__(
        self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        """A Django execute wrapper: adds the statement's time to `sql_seconds`."""
        began = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self.sql_seconds += time.perf_counter() - began

    @property
    def rate(self) -> float:
        """Workflows per second over every round."""
        return len(self.samples["start"]) / self.seconds

    def p50_ms(self, step: str) -> float:
        """The median of one step, in milliseconds."""
        return percentile(self.samples[step], 0.5) / 1e6

    @property
    def p50_total_ms(self) -> float:
        """The step medians added up: a workflow's typical time, robust to outliers."""
        return sum(self.p50_ms(step) for step in STEPS)

    @property
    def sql_ms(self) -> float | None:
        """Milliseconds inside `cursor.execute` per workflow (None: not a Django contender)."""
        if not self.sql_seconds:
            return None
        return 1000 * self.sql_seconds / len(self.samples["start"])

    @property
    def per_workflow(self) -> int:
        """Statements of one whole workflow."""
        return sum(self.statements.values())


def _workflow(contender: Any, figures: Figures) -> None:
    clock = time.perf_counter_ns
    began = clock()
    handle = contender.start()
    started = clock()
    contender.submit(handle)
    submitted = clock()
    contender.approve(handle)
    approved = clock()
    figures.samples["start"].append(started - began)
    figures.samples["submit"].append(submitted - started)
    figures.samples["approve"].append(approved - submitted)
    figures.seconds += (approved - began) / 1e9


def _count(contender: Any, figures: Figures) -> None:
    """One untimed workflow with every step's statements captured."""
    if not contender.django:
        figures.statements = dict(contender.statements)
        return
    handle: Any = None
    actions: dict[str, Callable[[], Any]] = {
        "start": contender.start,
        "submit": lambda: contender.submit(handle),
        "approve": lambda: contender.approve(handle),
    }
    for step in STEPS:
        with CaptureQueriesContext(connection) as captured:
            result = actions[step]()
        if step == "start":
            handle = result
        queries = [query["sql"] for query in captured.captured_queries]
        figures.statements[step] = len(queries)
        figures.listing[step] = queries


def measure() -> list[Figures]:
    """Warm every contender, count its statements, then ROUNDS interleaved timed rounds."""
    raw = RawFloor()
    contenders: list[Any] = [
        raw,
        FsmLibrary(),
        SpiffLibrary(),
        ViewflowLibrary(),
        ThisProject(),
        ThisProjectWithScripts(),
    ]
    results = {contender.name: Figures(contender.name) for contender in contenders}
    try:
        for contender in contenders:
            warm = Figures(contender.name)
            for _ in range(WARMUP):
                _workflow(contender, warm)
            _count(contender, results[contender.name])
        per_round = WORKFLOWS // ROUNDS
        for round_number in range(ROUNDS):
            shift = round_number % len(contenders)
            for contender in contenders[shift:] + contenders[:shift]:
                figures = results[contender.name]
                with connection.execute_wrapper(figures):
                    for _ in range(per_round):
                        _workflow(contender, figures)
    finally:
        raw.close()
    return list(results.values())


# --- report -------------------------------------------------------------------------------------


def _short(sql: str) -> str:
    text = " ".join(sql.split())
    return text if len(text) <= 110 else text[:107] + "..."


def _verb(sql: str) -> str:
    """`SELECT table`, `UPDATE table`, `BEGIN` ...: what one statement does, in two words."""
    text = " ".join(sql.split()).removeprefix("1 times: ")
    verb = text.split(" ", 1)[0].upper()
    if verb == "WITH":
        verb = "CTE"
    table = re.search(r'(?:FROM|INTO|UPDATE)\s+"?(\w+)"?', text, re.IGNORECASE)
    lock = " FOR UPDATE" if verb == "SELECT" and "FOR UPDATE" in text.upper() else ""
    return f"{verb} {table.group(1)}{lock}" if table and verb != "SAVEPOINT" else verb


def _peer_key(name: str) -> str:
    return next(key for key in TARGETS if name.startswith(key))


def report(results: list[Figures]) -> None:
    """The table, the ratios of this project to each contender, this project's statements."""
    ours = next(item for item in results if item.name == ThisProject.name)
    print(
        f"\norder workflow in process: {WORKFLOWS} workflows per contender, {ROUNDS} interleaved "
        f"rounds of {WORKFLOWS // ROUNDS}, one connection each (warm-up {WARMUP})"
    )
    print(
        f"{'contender':<22} {'wf/s':>7} {'stmts/wf':>8} {'(start+submit+approve)':>22} "
        f"{'start p50':>9} {'submit p50':>10} {'approve p50':>11} {'ms/wf':>6} {'sql ms':>6} "
        f"{'ours/this':>9} {'by p50':>6}"
    )
    for item in results:
        split = "+".join(str(item.statements[step]) for step in STEPS)
        mean_ms = 1000 * item.seconds / len(item.samples["start"])
        sql_ms = f"{item.sql_ms:>6.2f}" if item.sql_ms is not None else f"{'-':>6}"
        print(
            f"{item.name:<22} {item.rate:>7.0f} {item.per_workflow:>8} {split:>22} "
            f"{item.p50_ms('start'):>9.2f} {item.p50_ms('submit'):>10.2f} "
            f"{item.p50_ms('approve'):>11.2f} {mean_ms:>6.2f} {sql_ms} "
            f"{ours.rate / item.rate:>8.2f}x {item.p50_total_ms / ours.p50_total_ms:>5.2f}x"
        )
    print(
        "  p50 in ms; stmts = CaptureQueriesContext statements (BEGIN and COMMIT included), the "
        "floor's own count; ms/wf = mean per workflow; sql ms = inside cursor.execute (COMMIT "
        "not included); ours/this = this project's workflows/s over the contender's; by p50 = the "
        "same ratio from the sums of the step p50s (steadier on a busy machine)"
    )
    for item in results:
        if item.listing:
            print(f"  {item.name}:")
            for step in STEPS:
                verbs = ", ".join(_verb(sql) for sql in item.listing[step])
                print(f"    {step:<7} {verbs}")
    scripted = next(item for item in results if item.name == ThisProjectWithScripts.name)
    fsm = next(item for item in results if item.name.startswith("django-fsm-2"))
    print(
        f"  {scripted.name}: {scripted.rate / fsm.rate:.2f}x {fsm.name} by workflows/s, "
        f"{fsm.p50_total_ms / scripted.p50_total_ms:.2f}x by p50 (target >= {SCRIPTS_TARGET:g}x)"
    )
    for item in results:
        if item is ours or item is scripted:
            continue
        key = _peer_key(item.name)
        wanted = TARGETS[key]
        ratio = ours.rate / item.rate
        record(
            f"order workflow/s vs {key}",
            ours.rate,
            "/s",
            baseline=item.name,
            baseline_value=item.rate,
            target=f">= {wanted}x",
            met=ratio >= wanted,
        )
    record(
        "order + a script task per step workflow/s vs django-fsm-2",
        scripted.rate,
        "/s",
        baseline=fsm.name,
        baseline_value=fsm.rate,
        target=f">= {SCRIPTS_TARGET:g}x",
        met=scripted.rate / fsm.rate >= SCRIPTS_TARGET,
    )
    record(
        "order statements per workflow",
        ours.per_workflow,
        "",
        baseline=f"{RawFloor.name} statements",
        baseline_value=RawFloor.statements["start"] * len(STEPS),
        target=f"<= {STATEMENT_TARGET}",
        met=ours.per_workflow <= STATEMENT_TARGET,
    )
    print(f"\nthis project's statements per step ({ours.per_workflow} a workflow):")
    for step in STEPS:
        print(f"  {step} ({ours.statements[step]}):")
        for number, sql in enumerate(ours.listing[step], 1):
            print(f"    {number:>2}. {_short(sql)}")


def profile(contender: ThisProject) -> None:
    """cProfile of PROFILE_WORKFLOWS workflows of `contender` (top 25 by internal time)."""
    figures = Figures(contender.name)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(PROFILE_WORKFLOWS):
        _workflow(contender, figures)
    profiler.disable()
    print(
        f"\ncProfile of {PROFILE_WORKFLOWS} order workflows of {contender.name} (top 25 by tottime)"
    )
    pstats.Stats(profiler).strip_dirs().sort_stats("tottime").print_stats(25)


def main() -> None:
    """Set up, measure, print."""
    print(f"database {settings.DATABASES['default']['NAME']} (PostgreSQL, own bench database)")
    logging.getLogger("spiff").setLevel(logging.WARNING)
    logging.getLogger("vnext.pipeline").setLevel(logging.WARNING)
    began = time.perf_counter()
    prepare_database()
    load_before = os.getloadavg()[0]
    results = measure()
    report(results)
    cpus = os.cpu_count() or 1
    load_after = os.getloadavg()[0]
    busy = max(load_before, load_after) > cpus
    print(
        f"\n  load average (1 min) {load_before:.2f} before, {load_after:.2f} after, {cpus} CPUs"
        + (
            ": the machine was BUSY, absolute figures are low (the ratios hold better)"
            if busy
            else ""
        )
    )
    wanted = os.environ.get("BENCH_PROFILE")
    if wanted:
        profile(ThisProjectWithScripts() if wanted == "scripts" else ThisProject())
    print(f"\norder suite: {time.perf_counter() - began:.0f}s")
