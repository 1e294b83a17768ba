"""http_request / web_fetch behind the SSRF guard, against loopback test servers only."""

from __future__ import annotations

import ipaddress
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from services.tools.builtins.http import HttpRequest, SafeFetcher, WebFetch
from services.tools.catalog import ToolError, ToolRegistry
from services.tools.host import ToolHost
from services.tools.netguard import AddressPolicy, blocked_reason
from shuttle.tool_calls import ToolCall


class Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.path.startswith("/redirect"):
            target = self.path.split("to=", 1)[1]
            self.send_response(302)
            self.send_header("Location", target)
            self.end_headers()
            return
        if self.path == "/big":
            body = b"x" * 50_000
            ctype = "text/plain"
        elif self.path == "/page":
            body = (
                b"<html><head><title>Hi</title><script>var s=1</script></head>"
                b"<body><p>Hello <b>there</b></p><p>Second</p></body></html>"
            )
            ctype = "text/html; charset=utf-8"
        else:
            body = json.dumps({"host": self.headers["Host"], "path": self.path}).encode()
            ctype = "application/json"
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def server() -> Iterator[int]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1]
    httpd.shutdown()


def host_with(policy: AddressPolicy, max_bytes: int = 10_000) -> ToolHost:
    fetcher = SafeFetcher(policy, max_bytes=max_bytes, timeout_seconds=5)
    return ToolHost(ToolRegistry([HttpRequest(fetcher, max_bytes), WebFetch(fetcher, max_bytes)]))


async def fetch(host: ToolHost, url: str, tool: str = "http_request", **extra: Any) -> Any:
    return await host.execute(
        ToolCall(tool_name=tool, arguments_json=json.dumps({"url": url, **extra}))
    )


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:{port}/",
        "http://127.1:{port}/",
        "http://localhost:{port}/",
        "http://[::1]:{port}/",
        "http://[::ffff:127.0.0.1]:{port}/",
        "http://10.0.0.5/",
        "http://172.16.3.4/",
        "http://192.168.1.1/",
        "http://169.254.169.254/latest/meta-data/",
        "http://[fe80::1]/",
        "http://[fd00:ec2::254]/",
        "http://0.0.0.0:{port}/",
        "http://100.64.0.1/",
    ],
)
async def test_internal_addresses_are_refused(server: int, url: str) -> None:
    result = await fetch(host_with(AddressPolicy()), url.format(port=server))
    assert result.error
    assert "refused to connect" in result.observation
    assert "only public hosts are allowed" in result.observation


async def test_names_resolving_to_internal_addresses_are_refused() -> None:
    async def resolver(host: str, port: int) -> list[str]:
        # A name with one public and one internal address: a later lookup could pick either.
        return {"mixed.test": ["93.184.216.34", "10.1.2.3"], "meta.test": ["169.254.169.254"]}[host]

    host = host_with(AddressPolicy(resolver=resolver))
    for name in ("mixed.test", "meta.test"):
        result = await fetch(host, f"http://{name}/")
        assert result.error and f"refused to connect to {name}" in result.observation


async def test_allow_listed_host_is_fetched_with_its_name(server: int) -> None:
    host = host_with(AddressPolicy.from_list(["127.0.0.1"]))
    result = await fetch(host, f"http://127.0.0.1:{server}/hello")
    assert result.ok
    head, body = result.observation.split("\n\n", 1)
    assert json.loads(head)["status"] == 200
    assert json.loads(body) == {"host": f"127.0.0.1:{server}", "path": "/hello"}


async def test_every_redirect_hop_is_checked(server: int) -> None:
    host = host_with(AddressPolicy.from_list(["127.0.0.1"]))
    # 127.0.0.1/32 is allowed; other loopback addresses and the metadata service are not.
    for target in (f"http://127.0.0.2:{server}/", "http://169.254.169.254/", "http://10.0.0.1/"):
        result = await fetch(host, f"http://127.0.0.1:{server}/redirect?to={target}")
        assert result.error and "refused to connect" in result.observation, target
    followed = await fetch(host, f"http://127.0.0.1:{server}/redirect?to=/landed")
    assert json.loads(followed.observation.split("\n\n", 1)[1])["path"] == "/landed"


async def test_response_size_is_limited(server: int) -> None:
    host = host_with(AddressPolicy.from_list(["127.0.0.0/8"]), max_bytes=1000)
    result = await fetch(host, f"http://127.0.0.1:{server}/big")
    assert "[response cut at 1,000 bytes (SHUTTLE_HTTP_MAX_RESPONSE_BYTES)]" in result.observation
    assert result.observation.split("\n\n", 1)[1].count("x") == 1000


async def test_web_fetch_reduces_html_to_text(server: int) -> None:
    host = host_with(AddressPolicy.from_list(["127.0.0.1"]))
    result = await fetch(host, f"http://127.0.0.1:{server}/page", tool="web_fetch")
    assert result.observation == "# Hi\n\nHello there\nSecond"


async def test_bad_urls_are_explained() -> None:
    host = host_with(AddressPolicy())
    for url, message in (
        ("file:///etc/passwd", "only http:// and https://"),
        ("http://user:pw@example.test/", "embedded credentials"),
        ("not a url", "only http:// and https://"),
    ):
        result = await fetch(host, url)
        assert result.error and message in result.observation, url


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("8.8.8.8", None),
        ("2606:4700:4700::1111", None),
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("::ffff:10.0.0.1", "private"),
        ("169.254.169.254", "link-local"),
        ("64:ff9b::a00:1", "private"),
    ],
)
def test_blocked_reason(address: str, reason: str | None) -> None:
    assert blocked_reason(ipaddress.ip_address(address)) == reason


async def test_unresolvable_name_is_a_tool_error() -> None:
    async def resolver(host: str, port: int) -> list[str]:
        raise OSError("Name or service not known")

    with pytest.raises(ToolError, match="cannot resolve host"):
        await AddressPolicy(resolver=resolver).vet("nowhere.test", 80)
