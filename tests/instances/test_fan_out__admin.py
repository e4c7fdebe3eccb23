"""The admin's task journal of an instance groups a fan-out batch's item rows under the batch."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from tests.engine.builders import task_component as task
from tests.instances.test_fan_out__concurrency import ECHO_MAPPING, INNER, fan_flow, go, start
from tests.instances.workflows import publish

pytestmark = pytest.mark.django_db


def test_item_rows_follow_their_batch_indented_as_items(operator_client, admin_client):
    publish(
        task("inner", "7", {}),
        task("fan", "21", {"itemsPath": "$.items", "task": INNER}),
        fan_flow(mapping=ECHO_MAPPING),
    )
    instance_id = start(operator_client, "fan-flow", {"items": [{"n": 1}, {"n": 2}, {"n": 3}]})
    assert go(operator_client, "fan-flow", instance_id).status_code == 200

    page = admin_client.get(reverse("admin:instances_instance_change", args=[instance_id]))

    assert page.status_code == 200
    html = page.content.decode()
    journal = re.findall(r'<td class="task">(.*?)</td>', html, re.S)
    # The start's script task, the batch, then its three items in order.
    assert journal[-4] == "fan"
    assert [re.findall(r"&#8627; item #(\d)</span>", row) for row in journal[-3:]] == [
        ["0"],
        ["1"],
        ["2"],
    ]
