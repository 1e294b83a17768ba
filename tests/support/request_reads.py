"""Which fields of its request an RPC handler reads, found by reading the handler's source.

`request_reads` parses the handler with `ast` and follows the request as a value: into the
names it is assigned to, through loops over a request stream or a repeated field, and into
every function of the project it is passed to (methods on `self`, module functions, imported
functions, closures and callbacks), found with `inspect` from the objects the handler's
module really holds, so a helper that moves to another module is still followed. Reading a
field is an attribute access (`request.x`), `getattr(request, "x")`, `HasField("x")`, or a
`WhichOneof` whose branches the function names; building a message from a part of the
request, or serializing it, reads that part whole. Where the request goes somewhere the
analysis cannot see into (stored on an object, handed to a library, formatted into a
string), the place is reported as lost rather than guessed about either way.

Fields of the `shuttle.v1` messages nested in a request count too (`events[].type`); a field
holding a well-known type (`Timestamp`) is read when the field is. A name holds the last
value assigned to it in source order, so a part of the request assigned to one name in two
branches is followed from the later one: the analysis errs towards reporting a field unread.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from dataclasses import dataclass

from google.protobuf.descriptor import Descriptor, MethodDescriptor

from tests.support.request_flow import RequestFlow
from tests.support.request_values import Instance, Many, Msg, Path, Value, code_of, project_message


@dataclass(frozen=True)
class RequestReads:
    """What one handler does with its request: the fields it reads, the messages it reads
    whole, and the places where the request goes out of the analysis's sight."""

    read: frozenset[Path]
    whole: frozenset[Path]
    lost: tuple[str, ...]

    def covers(self, path: Path) -> bool:
        return path in self.read or any(path[:n] in self.whole for n in range(len(path) + 1))


def field_paths(descriptor: Descriptor, outer: tuple[str, ...] = ()) -> Iterator[Path]:
    """Every field of `descriptor`, each followed by those of the project message it holds."""
    enclosing = (*outer, descriptor.full_name)
    for fd in descriptor.fields:
        yield (fd.name,)
        nested = project_message(fd)
        if nested is not None and nested.full_name not in enclosing:
            for path in field_paths(nested, enclosing):
                yield (fd.name, *path)


def unread_fields(descriptor: Descriptor, reads: RequestReads) -> list[Path]:
    """The fields never read whose enclosing message is read (theirs would only repeat it)."""
    return [
        path
        for path in field_paths(descriptor)
        if not reads.covers(path) and (len(path) == 1 or reads.covers(path[:-1]))
    ]


def request_reads(servicer: type, rpc: MethodDescriptor) -> RequestReads:
    """What `servicer`'s handler of `rpc` reads of its request (or of each streamed one)."""
    handler = inspect.getattr_static(servicer, rpc.name, None)
    code = code_of(handler) if inspect.isfunction(handler) else None
    if code is None:
        return RequestReads(frozenset(), frozenset(), (f"{servicer.__name__} has no {rpc.name}",))
    message = Msg(rpc.input_type, ())
    request: Value = Many(message) if rpc.client_streaming else message
    analysis = RequestFlow()
    analysis.invoke(code, None, [Instance(servicer), request], {})
    return RequestReads(frozenset(analysis.read), frozenset(analysis.whole), tuple(analysis.lost))
