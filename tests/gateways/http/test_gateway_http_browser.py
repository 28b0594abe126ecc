"""The live view in a real headless Chromium (Debian's chromium and chromium-driver, driven by Selenium).

Selenium Manager is kept from fetching anything: the driver and the browser
are the Debian binaries, named explicitly.
"""
from __future__ import annotations

import shutil
import urllib.request

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from fyrehose import Client
from fyrehose.subjects.envelope import Envelope

from gateway_support import GatewayProcess
from support import EVENT_WITHIN, LOOPBACK

CHROMEDRIVER = "/usr/bin/chromedriver"
CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if shutil.which(CHROMEDRIVER) is None or shutil.which(CHROMIUM) is None:
        pytest.fail("chromium and chromium-driver are needed: tools/bootstrap --test installs them")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                 f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def http_gateway(module_backbone, tmp_path_factory):
    process = GatewayProcess("http", module_backbone.address, tmp_path_factory.mktemp("http-browser")).start()
    yield process
    process.kill()


def publish(gateway: GatewayProcess, subject: str, data: bytes) -> None:
    request = urllib.request.Request(f"http://{LOOPBACK}:{gateway.port}/v1/publish/{subject}", data=data, method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


def test_live_view_shows_published_messages_and_draws_the_rate(browser, http_gateway):
    wait = WebDriverWait(browser, EVENT_WITHIN)
    browser.get(f"http://{LOOPBACK}:{http_gateway.port}/")
    assert browser.title == "fyrehose live view"
    wait.until(lambda d: d.find_element(By.ID, "status").get_attribute("data-state") == "open",
               "the page did not subscribe over /resp")
    publish(http_gateway, "browser.prices.acme", b"101.5")
    wait.until(lambda d: "browser.prices.acme" in d.find_element(By.ID, "messages").text,
               "the published message did not appear")
    row = browser.find_element(By.CSS_SELECTOR, "#messages tbody tr").find_elements(By.TAG_NAME, "td")
    assert [cell.text for cell in row[1:]] == ["browser.prices.acme", "5", "101.5"]
    first_seq = int(row[0].text)
    assert first_seq > 0  # the backbone sequence, from the RESP3 attribute
    for i in range(20):
        publish(http_gateway, "browser.prices.acme", b"%d" % i)
    wait.until(lambda d: d.find_element(By.ID, "total").text == "21", "the count is not exact")
    last = browser.find_element(By.CSS_SELECTOR, "#last tbody tr").find_elements(By.TAG_NAME, "td")
    assert [last[0].text, last[1].text, last[3].text] == ["browser.prices.acme", "21", "19"]
    chart = browser.find_element(By.ID, "chart")
    wait.until(lambda d: int(chart.get_attribute("data-series") or 0) >= 1, "the rate chart drew no series")
    painted = browser.execute_script(
        "const c = document.getElementById('chart'); const d = c.getContext('2d')"
        ".getImageData(0, 0, c.width, c.height).data; let n = 0;"
        "for (let i = 0; i < d.length; i += 4) if (d[i] > 200 && d[i + 1] > 80 && d[i + 1] < 160 && d[i + 2] < 90) n++;"
        "return n;")
    assert painted > 10, "no pixel of the busiest subject's colour (orange) on the chart"
    wait.until(lambda d: d.find_element(By.ID, "position").text.isdigit()
               and int(d.find_element(By.ID, "position").text) >= first_seq, "no stream position shown")
    assert browser.find_element(By.ID, "lost").text == "0"


def test_live_view_filters_by_the_typed_pattern(browser, http_gateway):
    wait = WebDriverWait(browser, EVENT_WITHIN)
    browser.get(f"http://{LOOPBACK}:{http_gateway.port}/")
    pattern = browser.find_element(By.ID, "pattern")
    pattern.clear()
    pattern.send_keys("browser.*.b")
    browser.find_element(By.ID, "subscribe").click()
    wait.until(lambda d: "browser.*.b" in d.find_element(By.ID, "status").text, "the page did not resubscribe")
    publish(http_gateway, "browser.a.c", b"no")
    publish(http_gateway, "browser.a.b.c", b"no")
    publish(http_gateway, "browser.a.b", b"yes")
    wait.until(lambda d: "browser.a.b" in d.find_element(By.ID, "messages").text, "the matching message did not appear")
    assert browser.find_element(By.ID, "total").text == "1"
    assert "browser.a.c" not in browser.find_element(By.ID, "messages").text


def test_live_view_counts_a_burst_exactly(browser, http_gateway, module_backbone):
    """A burst much faster than the page redraws: every message is counted, per subject too."""
    wait = WebDriverWait(browser, EVENT_WITHIN)
    browser.get(f"http://{LOOPBACK}:{http_gateway.port}/")
    pattern = browser.find_element(By.ID, "pattern")
    pattern.clear()
    pattern.send_keys("burst.>")
    browser.find_element(By.ID, "subscribe").click()
    wait.until(lambda d: "subscribed to burst.>" in d.find_element(By.ID, "status").text, "the page did not subscribe")
    with Client(module_backbone.address, subscribe=False) as publisher:
        for start in range(0, 10_000, 1000):
            publisher.publish_many([Envelope(f"burst.s{i % 10}", b"%d" % i) for i in range(start, start + 1000)])
    wait.until(lambda d: d.find_element(By.ID, "total").text == "10000",
               "the page did not count all 10,000 messages")
    rows = [row.find_elements(By.TAG_NAME, "td") for row in browser.find_elements(By.CSS_SELECTOR, "#last tbody tr")]
    assert sorted((cells[0].text, cells[1].text) for cells in rows) == [(f"burst.s{n}", "1000") for n in range(10)]
    assert browser.find_element(By.ID, "status").get_attribute("data-state") == "open"



def test_the_browsers_event_source_reads_the_stream(browser, http_gateway):
    """Chromium's own EventSource on /v1/stream: text as it is, binary as base64 said in the event type."""
    wait = WebDriverWait(browser, EVENT_WITHIN)
    browser.get(f"http://{LOOPBACK}:{http_gateway.port}/healthz")
    browser.execute_script("""
        window.got = [];
        const source = new EventSource('/v1/stream/es.%3E');
        const keep = (event) => window.got.push([event.type, event.lastEventId, event.data]);
        source.addEventListener('es.text', keep);
        source.addEventListener('es.bin base64', keep);
        source.onopen = () => { window.opened = true; };
    """)
    wait.until(lambda d: d.execute_script("return window.opened === true"), "EventSource did not open")
    publish(http_gateway, "es.text", "caf\u00e9\nline two".encode())
    publish(http_gateway, "es.bin", bytes(range(8)))
    wait.until(lambda d: len(d.execute_script("return window.got")) == 2, "EventSource did not get both events")
    (text_type, text_id, text), (bin_type, bin_id, data) = browser.execute_script("return window.got")
    assert (text_type, text) == ("es.text", "caf\u00e9\nline two")
    assert (bin_type, data) == ("es.bin base64", "AAECAwQFBgc=")
    assert 0 < int(text_id) < int(bin_id)


def test_the_page_cost_command_measures_the_live_view():
    """The figure comes from this command; here only its shape is checked, never a time."""
    from fyrehose.tools.bench import page_cost

    report = page_cost.measure(messages=2000, runs=1)
    assert report["messages"] == 2000 and len(report["runs_us_per_message"]) == 1
    assert report["median_us_per_message"] > 0 and report["median_chart_redraw_ms"] >= 0


# ---------------------------------------------------------------- a gateway with --users: the page asks for a token

@pytest.fixture(scope="module")
def users_gateway(module_backbone, tmp_path_factory):
    """A gateway whose users file lets nobody in without a token; ``viewer`` may read everything."""
    from fyrehose.gateways.access.permissions import Permissions
    from fyrehose.gateways.access.secrets import new_token
    from fyrehose.gateways.access.users import Entry, User, UsersFile

    directory = tmp_path_factory.mktemp("http-browser-users")
    token, token_id, stored = new_token()
    viewer = Entry(User("viewer", Permissions.of(["browser.>"])), tokens={token_id: stored})
    (directory / "users.json").write_bytes(UsersFile({"viewer": viewer}).to_json())
    process = GatewayProcess("http", module_backbone.address, directory,
                             ["--users", str(directory / "users.json")]).start()
    process.token = token  # type: ignore[attr-defined]
    yield process
    process.kill()


def publish_as(gateway: GatewayProcess, subject: str, data: bytes) -> None:
    request = urllib.request.Request(f"http://{LOOPBACK}:{gateway.port}/v1/publish/{subject}", data=data,
                                     method="POST", headers={"Authorization": f"Bearer {gateway.token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


def test_live_view_asks_for_a_token_and_keeps_it_for_the_tab(browser, users_gateway):
    wait = WebDriverWait(browser, EVENT_WITHIN)
    browser.get(f"http://{LOOPBACK}:{users_gateway.port}/")
    browser.execute_script("sessionStorage.clear()")
    browser.refresh()
    wait.until(lambda d: d.find_element(By.ID, "login-form").is_displayed(), "the page did not ask for a token")
    assert "asks for a token" in browser.find_element(By.ID, "login-reason").text
    wait.until(lambda d: d.find_element(By.ID, "status").text == "waiting for a token", "the socket was let in")
    browser.find_element(By.ID, "token").send_keys("fh_0123456789abcdef_wrong")
    browser.find_element(By.ID, "login").click()
    wait.until(lambda d: "refused this token" in d.find_element(By.ID, "login-reason").text
               and d.find_element(By.ID, "login-form").is_displayed(), "a wrong token was not refused")
    # Refused, the token is not sent again while the page asks for another: each try would be a failed
    # login from this address, and a few more would have the gateway refuse the right token too (429).
    browser.execute_script("""
        window.metricsAsked = 0;
        const fetched = window.fetch;
        window.fetch = (url, options) => { if (url === "/metrics") window.metricsAsked++; return fetched(url, options); };
        window.ticks = 0;
        setInterval(() => window.ticks++, 1000);
    """)
    wait.until(lambda d: d.execute_script("return window.ticks") >= 3, "the page's timers did not run")
    assert browser.execute_script("return window.metricsAsked") == 0  # its once-a-second poll ran twice meanwhile
    browser.find_element(By.ID, "token").send_keys(users_gateway.token)
    browser.find_element(By.ID, "login").click()
    wait.until(lambda d: d.find_element(By.ID, "status").get_attribute("data-state") == "open",
               "the page did not subscribe with the token")
    assert not browser.find_element(By.ID, "login-form").is_displayed()
    publish_as(users_gateway, "browser.users.acme", b"42")
    wait.until(lambda d: "browser.users.acme" in d.find_element(By.ID, "messages").text,
               "the published message did not appear")
    wait.until(lambda d: d.find_element(By.ID, "position").text.isdigit(), "/metrics was not read with the token")
    browser.refresh()  # the token stays for this tab: no second question
    wait.until(lambda d: d.find_element(By.ID, "status").get_attribute("data-state") == "open",
               "the page did not reconnect with the kept token")
    assert not browser.find_element(By.ID, "login-form").is_displayed()
    assert users_gateway.token not in users_gateway.log_text()  # the token travelled in the WebSocket's URL


def test_the_browsers_event_source_reads_the_stream_with_a_token(browser, users_gateway):
    wait = WebDriverWait(browser, EVENT_WITHIN)
    browser.get(f"http://{LOOPBACK}:{users_gateway.port}/healthz")
    browser.execute_script("""
        window.got = [];
        const source = new EventSource('/v1/stream/browser.es.%3E?access_token=' + encodeURIComponent(arguments[0]));
        source.addEventListener('browser.es.x', (event) => window.got.push(event.data));
        source.onopen = () => { window.opened = true; };
    """, users_gateway.token)
    wait.until(lambda d: d.execute_script("return window.opened === true"), "EventSource did not open")
    publish_as(users_gateway, "browser.es.x", b"with a token")
    wait.until(lambda d: d.execute_script("return window.got") == ["with a token"], "no event with the token")
