"""Tool outputs refused or cut before they are built: a few kilobytes of input that would
grow into gigabytes (a replace bomb, exponent towers, shared JSON references, compression
bombs) meet a named bound instead, with the tool host still answering."""

from __future__ import annotations

import gzip
import json
import threading
import tracemalloc
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from services.tools.builtins import default_tools
from services.tools.builtins.http import HttpRequest, SafeFetcher, WebFetch
from services.tools.catalog import ToolRegistry
from services.tools.host import ToolHost
from services.tools.netguard import AddressPolicy
from shuttle.tool_calls import ToolCall, ToolOutcome

BOMB_BYTES = 64 * 2**20  # what the compressed bodies below decode to


def _deflated(wbits: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, wbits)
    block = bytes(2**20)
    return b"".join(packer.compress(block) for _ in range(BOMB_BYTES // 2**20)) + packer.flush()


BOMBS = {
    "gzip": _deflated(16 + zlib.MAX_WBITS),
    "deflate": _deflated(zlib.MAX_WBITS),
    "raw-deflate": _deflated(-zlib.MAX_WBITS),
}


async def call(host: ToolHost, tool: str, **arguments: Any) -> ToolOutcome:
    return await host.execute(ToolCall(tool_name=tool, arguments_json=json.dumps(arguments)))


@pytest.fixture
def pure() -> ToolHost:
    return ToolHost(ToolRegistry(default_tools()), default_timeout_seconds=30)


async def test_replace_bomb_is_refused_before_it_is_built(pure: ToolHost) -> None:
    # 80 KB of 'a', each replaced by 80 KB: 6.4 GB if built.
    text = "a" * 80_000
    result = await call(pure, "text_utils", operation="replace", text=text, old="a", new=text)
    assert result.error
    assert "'replace' would build 6,400,000,000 characters" in result.observation
    assert "80,000 occurrences of 1 characters, each replaced by 80,000" in result.observation
    assert "over the limit of 1,000,000 characters" in result.observation
    fine = await call(pure, "text_utils", operation="replace", text="a-b-c", old="-", new="+")
    assert fine.observation == "a+b+c"


async def test_case_mapping_growth_is_bounded(pure: ToolHost) -> None:
    # 'ﬃ' (one character) upper-cases to 'FFI': 3x the input.
    result = await call(pure, "text_utils", operation="upper", text="ﬃ" * 400_000)
    assert result.error
    assert "'upper' built 1,200,000 characters, over the limit of 1,000,000" in (result.observation)


@pytest.mark.parametrize(
    ("expression", "fragment"),
    [
        ("9**9**9", "9 ** 387420489 is too large to compute: at least"),
        ("10**10**10", "10 ** 10000000000 is too large to compute: at least"),
        ("2**10**100", "over the limit of 4,000 bits (about 1,204 digits)"),
        ("(10**1000)**(10**1000)", "over the limit of 4,000 bits"),
    ],
)
async def test_exponent_towers_are_refused_with_the_bound(
    pure: ToolHost, expression: str, fragment: str
) -> None:
    result = await call(pure, "calculator", expression=expression)
    assert result.error and fragment in result.observation


@pytest.mark.parametrize(
    ("data", "expression", "fragment"),
    [
        # Shared references: nine pipes of ten print 10^9 numbers.
        ("[1]", " | ".join(["[@,@,@,@,@,@,@,@,@,@]"] * 9), "the result would be over the limit"),
        # Flattening copies them for real: refused before the list exists.
        ("[1]", " | ".join(["[@,@,@,@,@,@,@,@,@,@][]"] * 9), "values and characters"),
        (json.dumps("x" * 400_000), "join('', [@,@,@,@,@,@,@,@,@,@])", "join() reached"),
        ("[1]", " | ".join(["[@,@,@,@,@,@,@,@,@,@]"] * 9) + " | to_string(@)", "to_string()"),
    ],
)
async def test_json_queries_that_multiply_are_refused(
    pure: ToolHost, data: str, expression: str, fragment: str
) -> None:
    result = await call(pure, "json_transform", operation="query", data=data, expression=expression)
    assert result.error, result.observation[:200]
    assert fragment in result.observation
    assert "1,000,000" in result.observation or "2,000,000" in result.observation


async def test_pretty_printing_deep_nesting_is_bounded(pure: ToolHost) -> None:
    # 900 arrays nested 500 deep: under 1 MB as input, 250 MB of indentation printed.
    data = "[" + ",".join(["[" * 500 + "]" * 500] * 900) + "]"
    result = await call(pure, "json_transform", operation="pretty", data=data)
    assert result.error
    assert "the result would be over the limit of 1,000,000 characters" in result.observation
    minified = await call(pure, "json_transform", operation="minify", data=data)
    assert minified.ok and f"{len(data):,} characters total" in minified.observation


class BombHandler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        coding = self.path.strip("/")
        if coding == "plain-gzip":
            body, header = gzip.compress(b"hello, compressed world"), "gzip"
        elif coding == "br":
            body, header = b"\x0b\x02\x80hello", "br"
        else:
            body, header = BOMBS[coding], "deflate" if "deflate" in coding else "gzip"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Encoding", header)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def bomb_server() -> Iterator[int]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), BombHandler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1]
    httpd.shutdown()


def web_host(max_bytes: int) -> ToolHost:
    fetcher = SafeFetcher(AddressPolicy.from_list(["127.0.0.1"]), max_bytes, timeout_seconds=10)
    return ToolHost(
        ToolRegistry([HttpRequest(fetcher, max_bytes), WebFetch(fetcher, max_bytes)]),
        default_timeout_seconds=30,
    )


@pytest.mark.parametrize("coding", sorted(BOMBS))
async def test_decompression_bombs_are_cut_while_decompressing(
    bomb_server: int, coding: str
) -> None:
    assert len(BOMBS[coding]) < 100_000  # 64 MiB of zeros, compressed
    host = web_host(max_bytes=10_000)
    tracemalloc.start()
    try:
        result = await call(host, "http_request", url=f"http://127.0.0.1:{bomb_server}/{coding}")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.ok, result.observation
    body = result.observation.split("\n\n", 1)[1]
    assert body.startswith("\x00" * 10_000)
    encoding = "deflate" if "deflate" in coding else "gzip"
    assert (
        f"[response cut at 10,000 bytes (SHUTTLE_HTTP_MAX_RESPONSE_BYTES); it is {encoding}-"
        "encoded and decodes to more]"
    ) in body
    # Inflating the whole body would have taken 64 MiB at once.
    assert peak < 8 * 2**20


async def test_compressed_pages_still_read_and_unknown_encodings_are_named(
    bomb_server: int,
) -> None:
    host = web_host(max_bytes=10_000)
    page = await call(host, "web_fetch", url=f"http://127.0.0.1:{bomb_server}/plain-gzip")
    assert page.observation == "hello, compressed world"
    br = await call(host, "http_request", url=f"http://127.0.0.1:{bomb_server}/br")
    assert br.error
    assert "encoded as 'br', which this tool does not decode" in br.observation
