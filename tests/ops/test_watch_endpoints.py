"""Which endpoints fyrehose top reads: HOST:PORT or a URL, from arguments and a config file; bad ones in one line."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fyrehose.errors import InputError
from fyrehose.tools.watch.endpoints import MAX_ENDPOINTS, combine, display_name, endpoint_url, parse_config


@pytest.mark.parametrize("text, url", [
    ("127.0.0.1:9100", "http://127.0.0.1:9100/metrics"),
    ("backbone-a.example:9100", "http://backbone-a.example:9100/metrics"),
    ("http://10.0.0.3:8080/metrics", "http://10.0.0.3:8080/metrics"),
    ("https://10.0.0.3:8443", "https://10.0.0.3:8443/metrics"),
    ("http://10.0.0.3:8080/other/path", "http://10.0.0.3:8080/other/path"),
])
def test_an_endpoint_is_a_host_and_port_or_a_url(text, url):
    assert endpoint_url(text) == url


@pytest.mark.parametrize("text, why", [
    ("127.0.0.1", "expected HOST:PORT"), ("127.0.0.1:99999", "out of range"), ("ftp://h:21/x", "only http"),
    (":9100", "expected HOST:PORT"), ("h:x", "Port could not be cast"), ("http://h:1/a b", "no spaces"),
])
def test_a_bad_endpoint_is_refused_saying_why(text, why):
    with pytest.raises(InputError, match=why):
        endpoint_url(text)


def test_rows_name_the_usual_endpoint_by_host_and_port():
    assert display_name("http://127.0.0.1:9100/metrics") == "127.0.0.1:9100"
    assert display_name("https://h:1/metrics") == "https://h:1/metrics"
    assert display_name("http://h:1/x/metrics") == "http://h:1/x/metrics"


def test_a_config_lists_endpoints_with_comments_and_a_bad_line_is_named():
    text = "# the pair\n10.0.0.1:9100\n10.0.0.2:9100   # host B\n\nhttp://10.0.0.3:8080/metrics\n"
    assert parse_config(text, "deploy.conf") == ["http://10.0.0.1:9100/metrics", "http://10.0.0.2:9100/metrics",
                                                 "http://10.0.0.3:8080/metrics"]
    with pytest.raises(InputError, match=r"deploy.conf:2: endpoint 'nonsense'"):
        parse_config("10.0.0.1:9100\nnonsense\n", "deploy.conf")


def test_endpoints_are_read_once_each_and_there_is_at_least_one():
    assert combine(["http://a:1/metrics"], ["http://b:1/metrics", "http://a:1/metrics"]) == [
        "http://a:1/metrics", "http://b:1/metrics"]
    with pytest.raises(InputError, match="no endpoint"):
        combine([], [])
    with pytest.raises(InputError, match="at most"):
        combine([f"http://h:{port}/metrics" for port in range(1, MAX_ENDPOINTS + 2)])


@given(st.text(max_size=200))
def test_any_config_text_gives_endpoints_or_one_input_error(text):
    try:
        urls = parse_config(text, "forged.conf")
    except InputError as exc:
        assert str(exc).startswith("forged.conf:") and "\n" not in str(exc)
        return
    assert all(url.startswith(("http://", "https://")) for url in urls)


@given(st.from_regex(r"[a-z][a-z0-9.-]{0,20}", fullmatch=True), st.integers(1, 65535))
def test_host_and_port_become_their_metrics_url_and_read_back_in_rows(host, port):
    url = endpoint_url(f"{host}:{port}")
    assert url == f"http://{host}:{port}/metrics" and display_name(url) == f"{host}:{port}"
