"""`http_request` and `web_fetch`: outbound HTTP behind the SSRF guard, with size and time
limits, redirects followed by hand so every hop is vetted."""

from __future__ import annotations

import json
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any

import httpx

from services.tools.builtins.decompress import ACCEPTED, BoundedDecoder
from services.tools.catalog import ToolError, ToolOutput, ToolSpec
from services.tools.netguard import AddressPolicy

MAX_REDIRECTS = 5
_REDIRECTS = {301, 302, 303, 307, 308}
# Headers the model may not set: they would defeat the pinning or smuggle credentials.
_FORBIDDEN_HEADERS = {
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "accept-encoding",  # only what BoundedDecoder undoes
}


@dataclass(frozen=True)
class FetchResult:
    url: str
    status: int
    content_type: str
    body: bytes
    truncated: bool
    encoding: str = ""  # the Content-Encoding undone, if any

    def text(self) -> str:
        charset = "utf-8"
        if "charset=" in self.content_type:
            charset = self.content_type.split("charset=")[-1].split(";")[0].strip() or charset
        try:
            return self.body.decode(charset, errors="replace")
        except LookupError:
            return self.body.decode("utf-8", errors="replace")


class SafeFetcher:
    def __init__(self, policy: AddressPolicy, max_bytes: int, timeout_seconds: float) -> None:
        self._policy = policy
        self._max_bytes = max_bytes
        self._timeout = timeout_seconds

    async def fetch(
        self,
        method: str,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        body: str | None = None,
    ) -> FetchResult:
        current = self._parse(url)
        sent_headers = {
            k: v for k, v in (headers or {}).items() if k.lower() not in _FORBIDDEN_HEADERS
        }
        # trust_env=False: no proxy from the environment may route around the guard.
        async with httpx.AsyncClient(
            trust_env=False, follow_redirects=False, timeout=self._timeout
        ) as client:
            for _hop in range(MAX_REDIRECTS + 1):
                result = await self._one(client, method, current, sent_headers, body)
                if isinstance(result, FetchResult):
                    return result
                current = self._parse(str(current.join(result)))
                if method not in ("GET", "HEAD"):
                    method, body = "GET", None
            raise ToolError(f"too many redirects (more than {MAX_REDIRECTS}) from {url}")

    def _parse(self, url: str) -> httpx.URL:
        try:
            parsed = httpx.URL(url)
        except (httpx.InvalidURL, TypeError):
            raise ToolError(f"invalid URL {url!r}") from None
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise ToolError(f"only http:// and https:// URLs with a host are allowed, got {url!r}")
        if parsed.userinfo:
            raise ToolError("URLs with embedded credentials are not allowed")
        return parsed

    async def _one(
        self,
        client: httpx.AsyncClient,
        method: str,
        url: httpx.URL,
        headers: dict[str, str],
        body: str | None,
    ) -> FetchResult | str:
        port = url.port or (443 if url.scheme == "https" else 80)
        address = await self._policy.vet(url.host, port)
        # Connect to the vetted address; Host and TLS SNI (hence certificate checks) keep the
        # name, so the server sees an ordinary request.
        pinned = url.copy_with(host=address)
        request_headers = {
            **headers,
            "Host": url.netloc.decode("ascii"),
            "Accept-Encoding": ACCEPTED,
        }
        extensions = {"sni_hostname": url.host} if url.scheme == "https" else {}
        request = client.build_request(
            method, pinned, headers=request_headers, content=body, extensions=extensions
        )
        try:
            response = await client.send(request, stream=True)
        except httpx.TimeoutException:
            raise ToolError(f"{url} did not answer within {self._timeout:g} seconds") from None
        except httpx.HTTPError as exc:
            raise ToolError(f"request to {url} failed: {type(exc).__name__}: {exc}") from None
        try:
            if response.status_code in _REDIRECTS and "location" in response.headers:
                return response.headers["location"]
            decoder = BoundedDecoder(response.headers.get("content-encoding", ""))
            chunks: list[bytes] = []
            size = received = 0
            truncated = False
            # Raw bytes read as they came, so decompression is bounded by the same limit.
            async for raw in response.aiter_raw():
                received += len(raw)
                chunk = decoder.feed(raw, self._max_bytes + 1 - size)
                chunks.append(chunk)
                size += len(chunk)
                # The second bound: compressed input that decodes to (almost) nothing.
                if size > self._max_bytes or received > 2 * self._max_bytes:
                    truncated = True
                    break
            data = b"".join(chunks)[: self._max_bytes]
        except httpx.HTTPError as exc:
            raise ToolError(f"reading {url} failed: {type(exc).__name__}: {exc}") from None
        finally:
            await response.aclose()
        return FetchResult(
            url=str(url),
            status=response.status_code,
            content_type=response.headers.get("content-type", ""),
            body=data,
            truncated=truncated,
            encoding=decoder.encoding,
        )


class _TextExtractor(HTMLParser):
    """Visible text of an HTML page (the stdlib parser: tolerant, no extra dependency)."""

    _SKIP = {"script", "style", "noscript", "template", "svg"}
    _BLOCK = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skipping = 0
        self.title = ""
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._SKIP:
            self._skipping += 1
        elif tag == "title":
            self._in_title = True
        elif tag in self._BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self._SKIP and self._skipping:
            self._skipping -= 1
        elif tag == "title":
            self._in_title = False

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        elif not self._skipping:
            self.parts.append(data)

    def text(self) -> str:
        lines = (" ".join(line.split()) for line in "".join(self.parts).splitlines())
        return "\n".join(line for line in lines if line)


def html_to_text(html: str) -> str:
    parser = _TextExtractor()
    parser.feed(html)
    parser.close()
    title = " ".join(parser.title.split())
    body = parser.text()
    return f"# {title}\n\n{body}" if title else body


def _note(result: FetchResult, limit: int) -> str:
    if not result.truncated:
        return ""
    decoded = f"; it is {result.encoding}-encoded and decodes to more" if result.encoding else ""
    return f"\n…[response cut at {limit:,} bytes (SHUTTLE_HTTP_MAX_RESPONSE_BYTES){decoded}]"


class HttpRequest:
    spec = ToolSpec(
        name="http_request",
        description=(
            "Send an HTTP request to a public URL and return the status, content type and "
            "body. Internal and private addresses are refused."
        ),
        parameters={
            "type": "object",
            "properties": {
                "url": {"type": "string", "maxLength": 4096},
                "method": {
                    "type": "string",
                    "enum": ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"],
                },
                "headers": {
                    "type": "object",
                    "additionalProperties": {"type": "string"},
                    "maxProperties": 50,
                },
                "body": {"type": "string"},
            },
            "required": ["url"],
            "additionalProperties": False,
        },
        category="web",
    )

    def __init__(self, fetcher: SafeFetcher, max_bytes: int) -> None:
        self._fetcher = fetcher
        self._max_bytes = max_bytes

    async def run(self, args: dict[str, Any]) -> ToolOutput:
        result = await self._fetcher.fetch(
            args.get("method", "GET"),
            args["url"],
            headers=args.get("headers"),
            body=args.get("body"),
        )
        body = result.text() + _note(result, self._max_bytes)
        mime = result.content_type.split(";")[0].strip().lower()
        if mime in ("text/html", "text/markdown") and result.status < 400:
            return ToolOutput(text=body, content_type=mime)
        head = json.dumps({"status": result.status, "content_type": result.content_type})
        return ToolOutput(text=f"{head}\n\n{body}")


class WebFetch:
    spec = ToolSpec(
        name="web_fetch",
        description=(
            "Fetch a public web page and return its readable text (HTML is reduced to text). "
            "Internal and private addresses are refused."
        ),
        parameters={
            "type": "object",
            "properties": {
                "url": {"type": "string", "maxLength": 4096},
                "raw": {
                    "type": "boolean",
                    "description": "keep the page's HTML (stored as an artifact) instead of text",
                },
            },
            "required": ["url"],
            "additionalProperties": False,
        },
        category="web",
        read_only=True,
        cacheable=True,
    )

    def __init__(self, fetcher: SafeFetcher, max_bytes: int) -> None:
        self._fetcher = fetcher
        self._max_bytes = max_bytes

    async def run(self, args: dict[str, Any]) -> ToolOutput:
        result = await self._fetcher.fetch("GET", args["url"])
        if result.status >= 400:
            raise ToolError(f"web_fetch: {args['url']} answered HTTP {result.status}")
        text = result.text()
        if "html" in result.content_type.lower():
            if args.get("raw"):
                return ToolOutput(text=text, content_type="text/html")
            text = html_to_text(text)
        return ToolOutput(text=text + _note(result, self._max_bytes))
