"""A response body's Content-Encoding undone as it arrives, never past a byte limit.

Each call inflates only as much as the room left under the limit, so a few kilobytes of
gzip that would expand to gigabytes cost no more memory than the limit itself.
"""

from __future__ import annotations

import zlib

from services.tools.catalog import ToolError

# The encodings asked for (Accept-Encoding) and undone here.
ACCEPTED = "gzip, deflate"
_GZIP = 16 + zlib.MAX_WBITS


class BoundedDecoder:
    """Undoes one Content-Encoding (gzip or deflate) or none, producing at most `room` bytes
    per call."""

    def __init__(self, content_encoding: str) -> None:
        codings = [c.strip().lower() for c in content_encoding.split(",") if c.strip()]
        codings = [c for c in codings if c != "identity"]
        if len(codings) > 1 or (codings and codings[0] not in ("gzip", "x-gzip", "deflate")):
            raise ToolError(
                f"the response is encoded as {content_encoding!r}, which this tool does not "
                f"decode (it asks for {ACCEPTED} only)"
            )
        self.encoding = codings[0] if codings else ""
        self._wbits = zlib.MAX_WBITS if self.encoding == "deflate" else _GZIP
        self._inflater = zlib.decompressobj(self._wbits) if self.encoding else None
        self._started = False

    def feed(self, data: bytes, room: int) -> bytes:
        """The decoded bytes `data` yields, at most `room` of them; the rest is dropped."""
        if self._inflater is None:
            return data[:room]
        out = bytearray()
        while data and len(out) < room:
            try:
                out += self._inflater.decompress(data, room - len(out))
            except zlib.error as exc:
                if self.encoding == "deflate" and not self._started:
                    # Some servers send a raw deflate stream without the zlib header.
                    self._wbits = -zlib.MAX_WBITS
                    self._inflater = zlib.decompressobj(self._wbits)
                    self._started = True
                    continue
                raise ToolError(f"the {self.encoding} response body is corrupt ({exc})") from None
            self._started = True
            data = self._inflater.unconsumed_tail
            if self._inflater.eof:
                # gzip allows several members one after another.
                data = self._inflater.unused_data
                self._inflater = zlib.decompressobj(self._wbits)
        return bytes(out)
