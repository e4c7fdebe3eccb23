"""The admin's instance page follows its instance live: in headless Chromium, logged into the
admin of a `make run` server, the page's panel shows the new state after a transition made
through the API, without a reload (the page's document is the same one)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.wait import WebDriverWait

from tests.site.server import vnext_server
from tests.site.test_admin__browser_retry import browser  # noqa: F401  (the fixture)

pytestmark = [pytest.mark.slow]
AUTH = ("ops", "ops-secret-42")


def test_the_instance_page_shows_a_new_state_without_a_reload(
    tmp_path: Path,
    browser: WebDriver,  # noqa: F811
) -> None:
    env = {"VNEXT_OPERATOR_USERNAME": AUTH[0], "VNEXT_OPERATOR_PASSWORD": AUTH[1]}
    with vnext_server(tmp_path, env) as server:
        flow = f"{server.base}/api/v1/core/workflows/chain-busy-leaf/instances"
        started = httpx.post(f"{flow}/start?sync=true", json={}, auth=AUTH, timeout=30)
        assert started.status_code == 200, started.text
        instance_id = started.json()["id"]
        wait = WebDriverWait(browser, 30)

        browser.get(f"{server.base}/admin/login/")
        browser.find_element(By.ID, "id_username").send_keys(AUTH[0])
        browser.find_element(By.ID, "id_password").send_keys(AUTH[1])
        browser.find_element(By.CSS_SELECTOR, "#login-form [type=submit]").click()
        wait.until(EC.presence_of_element_located((By.ID, "user-tools")))
        browser.get(f"{server.base}/admin/instances/instance/{instance_id}/change/")
        wait.until(EC.text_to_be_present_in_element((By.ID, "vnext-live-note"), "live"))
        assert browser.find_element(By.ID, "vnext-live-state").text == "leaf-waiting"
        page = browser.find_element(By.TAG_NAME, "html")

        fired = httpx.patch(
            f"{flow}/{instance_id}/transitions/finish-leaf?sync=true", json={}, auth=AUTH
        )
        assert fired.status_code == 200, fired.text

        wait.until(EC.text_to_be_present_in_element((By.ID, "vnext-live-state"), "leaf-done"))
        assert browser.find_element(By.ID, "vnext-live-status").text == "C"
        assert "updated" in browser.find_element(By.ID, "vnext-live-note").text
        # The inspector's panels follow too: the timeline gains the transition, in place.
        wait.until(
            EC.text_to_be_present_in_element(
                (By.CSS_SELECTOR, ".field-timeline table.vnext-timeline"), "finish-leaf"
            )
        )
        assert browser.find_element(By.CSS_SELECTOR, ".field-status .readonly").text == (
            "Completed"
        )
        assert browser.find_element(By.TAG_NAME, "html") == page  # no reload
