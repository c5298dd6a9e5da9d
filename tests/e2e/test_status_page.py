"""The status page in a real browser: Debian's headless Chromium, driven by selenium
through Debian's chromedriver (never a downloaded browser or driver).

The page is opened first; a job started afterwards appears in it and its bar moves
without a reload, then the job leaves the running list.  Screenshots (desktop and
phone width) are kept under ``test-artifacts/status-page/`` for a person to look at.
Without chromium or chromedriver the test is skipped, unless
XRUNTIME_TEST_REQUIRE_BROWSER=1 (as in .ci/run), where their absence fails it.
"""

import os
import shutil
import time

import pytest

from tests.harness import ROOT

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
ARTIFACTS = os.path.join(ROOT, "test-artifacts", "status-page")


def _missing():
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not shutil.which(path)]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("the selenium package (pip install -e '.[test]')")
    return missing


@pytest.fixture(scope="module")
def browser():
    missing = _missing()
    if missing:
        why = (
            "no browser to test the status page with: missing "
            + ", ".join(missing)
            + " (apt-get install chromium chromium-driver)"
        )
        if os.environ.get("XRUNTIME_TEST_REQUIRE_BROWSER") == "1":
            pytest.fail(why + "; XRUNTIME_TEST_REQUIRE_BROWSER=1 requires it")
        pytest.skip(why)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1200,900",
        "--disable-gpu",
    ):
        options.add_argument(argument)
    # the driver's path given: Selenium Manager never looks for (or downloads) one
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def wait_for(condition, timeout, what):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"the page did not show {what} within {timeout} s"
        time.sleep(0.1)


def bar_value(browser, job_id):
    """The job's bar as the page shows it (None: the job is not listed)."""
    return browser.execute_script(
        "const li = document.querySelector('li[data-job-id=\"' + arguments[0] + '\"]');"
        "if (!li) return null;"
        "const p = li.querySelector('progress');"
        "return {value: p.hasAttribute('value') ? p.value : null,"
        "        text: li.querySelector('.ptext').textContent,"
        "        name: li.querySelector('.name').textContent};",
        job_id,
    )


def screenshot(browser, name):
    os.makedirs(ARTIFACTS, exist_ok=True)
    path = os.path.join(ARTIFACTS, name)
    assert browser.save_screenshot(path), path
    return path


def test_a_job_started_while_the_page_is_open_shows_and_its_bar_moves(browser, server):
    browser.get(f"{server.base}/")  # / leads to /status
    assert browser.current_url == f"{server.base}/status"
    wait_for(lambda: browser.find_element("id", "live").text == "live", 15, "its stream open")
    wait_for(lambda: browser.find_element("id", "node").text not in ("", "…"), 10, "the node")
    browser.execute_script("window.__loaded = 1")  # gone if the page reloads

    job = server.start_job(durationMs=6000, steps=20)
    first = wait_for(
        lambda: (bar_value(browser, job["id"]) or {}).get("value"),
        10,
        "the new job with a progress",
    )
    assert bar_value(browser, job["id"])["name"] == "XDemo.simulate"
    later = wait_for(
        lambda: (
            (bar_value(browser, job["id"]) or {}).get("value", 0) > first + 0.1
            and bar_value(browser, job["id"])["value"]
        ),
        10,
        "the bar moving",
    )
    assert 0 < first < later <= 1
    assert bar_value(browser, job["id"])["text"].endswith("/20")
    assert int(browser.find_element("id", "busy").text) >= 1
    screenshot(browser, "desktop.png")

    browser.set_window_size(390, 844)  # a phone
    wait_for(
        lambda: browser.execute_script("return window.innerWidth <= 390"), 30, "a phone's width"
    )
    assert browser.execute_script(
        "return document.documentElement.scrollWidth <= window.innerWidth"
    ), "no sideways scrolling"
    screenshot(browser, "phone.png")
    browser.set_window_size(1200, 900)

    wait_for(lambda: bar_value(browser, job["id"]) is None, 20, "the job leaving the running list")
    assert browser.execute_script("return window.__loaded") == 1, "the page must not have reloaded"
    assert browser.find_element("id", "none").is_displayed()
    screenshot(browser, "after.png")


MARKUP = '<img src=x onerror="window.__injected = 1">'


def test_job_fields_are_shown_as_text_never_as_markup(browser, server):
    """A snapshot whose service, user, node and progress text hold markup (as a
    service's own progress text or a proxy's mangling could) is drawn as those
    characters: no element is made of them and no script of theirs runs."""
    browser.get(f"{server.base}/status")
    wait_for(lambda: browser.find_element("id", "live").text == "live", 15, "its stream open")
    snapshot = browser.execute_script("return last")
    snapshot["running"] = [
        {
            "id": "x-1",
            "service": MARKUP,
            "operation": MARKUP,
            "user": MARKUP,
            "status": "RUNNING",
            "node": MARKUP,
            "elapsedMs": 1000,
            "parentId": MARKUP,
            "progress": None,
            "bar": {"fraction": 0.5, "text": MARKUP},
        }
    ]
    snapshot["node"] = MARKUP
    browser.execute_script("render(arguments[0])", snapshot)
    time.sleep(0.5)  # (an injected image would fail and fire by now)
    assert (
        browser.execute_script("return document.querySelectorAll('main img, header img').length")
        == 0
    )
    assert browser.execute_script("return window.__injected") is None
    row = bar_value(browser, "x-1")
    assert row["text"] == MARKUP and row["name"] == f"{MARKUP}.{MARKUP}"
    assert browser.find_element("id", "node").text == MARKUP
