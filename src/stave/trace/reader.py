"""Streaming, bounded-memory reader of torch.profiler (Kineto) and Chrome trace files.

A trace is ``{"traceEvents": [...], ...metadata}`` (or a bare ``[...]`` array, which Chrome also
accepts), plain or gzipped, pretty-printed or on one line, from a few KB to many GB. The reader
never holds more than about :data:`CHUNK_BYTES` of the file (plus the events decoded from it):

* The top-level object is walked exactly with the standard library's C scanner (``raw_decode``);
  metadata values (``distributedInfo``, ``deviceProperties``...) are small and decoded whole.
* Inside ``traceEvents`` the bytes are cut into pieces of about :data:`CHUNK_BYTES` at a candidate
  boundary ``}`` ``,`` ``{`` and each piece, wrapped in ``[...]``, is decoded by msgspec into typed
  :class:`~stave.trace.events.Event` structs (fields stave does not use are skipped in C). A
  candidate cut that falls inside a string or a nested value makes the piece invalid JSON (the
  prefix then ends inside that value), so a piece that decodes is exactly a run of whole events;
  a piece that does not is re-read event by event with the exact scanner, which also gives the
  byte offset and event number of a real syntax error.

Errors name the file and the (uncompressed) byte offset or event number, as one line.
"""

from __future__ import annotations

import gzip
import json
import logging
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Iterator

import msgspec

from stave.errors import FormatError, InputError
from stave.trace.events import EVENT_LIST_DECODER, LENIENT_DECODER, Event, event_from_dict
from stave.trace.times import ns_times_decoder

log = logging.getLogger(__name__)

# Bytes of trace decoded at a time: large enough that per-piece overhead vanishes, small enough that
# the decoded events of one piece (a few times its size in Python objects) stay far below 100 MB.
CHUNK_BYTES = 8 << 20
# A single profiler event is a few hundred bytes (a few KB with call stacks); one larger than this
# is not a profiler event, and buffering it would break the memory bound.
MAX_EVENT_BYTES = 64 << 20
# Metadata values (device properties, process-group configs of thousands of ranks) stay below this.
MAX_METADATA_BYTES = 64 << 20
# Candidate cut points tried per piece before falling back to the exact scanner (bounds the work a
# hostile file full of '}' can cause).
MAX_CUT_TRIES = 10_000

_GZIP_MAGIC = b"\x1f\x8b"
_WS = b" \t\r\n"
_CUT = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")
_SCANNER = json.JSONDecoder()
# Events read by the exact scanner keep fractional times as text, like the fast path (stave.trace.times).
_EVENT_SCANNER = json.JSONDecoder(parse_float=str)


@dataclass
class ReadStats:
    """What reading one file found besides its events."""

    path: str
    compressed: bool = False
    uncompressed_bytes: int = 0
    events: int = 0
    skipped_events: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)


def _open(path: Path) -> tuple[BinaryIO, bool]:
    try:
        raw = open(path, "rb")  # noqa: SIM115 (closed by the reader)
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from exc
    magic = raw.read(2)
    raw.seek(0)
    if magic == _GZIP_MAGIC:
        return gzip.GzipFile(fileobj=raw, mode="rb"), True  # type: ignore[return-value]
    return raw, False


class _Buffer:
    """A window on the (decompressed) byte stream: ``buf[pos:]`` is unread, ``base`` is buf[0]'s offset."""

    def __init__(self, stream: BinaryIO, where: str) -> None:
        self.stream = stream
        self.where = where
        self.buf = bytearray()
        self.pos = 0
        self.base = 0
        self.eof = False

    @property
    def offset(self) -> int:
        """Absolute (uncompressed) byte offset of the read position."""
        return self.base + self.pos

    def available(self) -> int:
        return len(self.buf) - self.pos

    def fill(self, want: int) -> None:
        """Make at least ``want`` unread bytes available, unless the stream ends first."""
        while not self.eof and self.available() < want:
            try:
                block = self.stream.read(max(CHUNK_BYTES, want - self.available()))
            except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
                raise FormatError(
                    f"{self.where}: corrupt or truncated gzip data after {self.base + len(self.buf)} "
                    f"uncompressed bytes ({exc}); re-export or re-copy the trace"
                ) from exc
            except OSError as exc:
                raise InputError(f"cannot read {self.where}: {exc.strerror or exc}") from exc
            if not block:
                self.eof = True
                break
            if self.pos > 1:
                # Keep one byte before the read position: pieces are bracketed in place (see below).
                drop = self.pos - 1
                del self.buf[:drop]
                self.base += drop
                self.pos = 1
            self.buf += block

    def skip_ws(self) -> None:
        """Advance past whitespace (reading more as needed)."""
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in _WS:
                self.pos += 1
            if self.pos < len(self.buf) or self.eof:
                return
            self.fill(1)

    def peek(self) -> int | None:
        """The next byte after whitespace, or None at the end of the stream."""
        self.skip_ws()
        return self.buf[self.pos] if self.pos < len(self.buf) else None


class TraceReader:
    """Read one trace file; iterate :meth:`chunks` for lists of events, then read :attr:`stats`."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.stats = ReadStats(path=str(self.path))
        # With the C time reader, fractional times are whole nanoseconds from the decoder's hook.
        self._decoder = ns_times_decoder() or EVENT_LIST_DECODER

    def _error(self, what: str, offset: int | None = None, event: int | None = None) -> FormatError:
        where = []
        if offset is not None:
            where.append(f"byte {offset}")
        if event is not None:
            where.append(f"event #{event}")
        at = f" at {', '.join(where)}" if where else ""
        return FormatError(f"{self.path}: {what}{at}")

    def chunks(self) -> Iterator[list[Event]]:
        """Yield the trace's events, a bounded piece at a time, in file order."""
        stream, compressed = _open(self.path)
        self.stats.compressed = compressed
        buf = _Buffer(stream, str(self.path))
        try:
            buf.fill(1)
            if buf.available() >= 3 and buf.buf[:3] == b"\xef\xbb\xbf":
                buf.pos = 3  # a UTF-8 byte-order mark some editors add
            first = buf.peek()
            if first is None:
                raise self._error("the file is empty; pass a trace written by torch.profiler")
            if first == ord("["):
                buf.pos += 1
                yield from self._events(buf, top_level=True)
            elif first == ord("{"):
                buf.pos += 1
                yield from self._object(buf)
            else:
                raise self._error("not a JSON trace (expected '{' or '[')", buf.offset)
            self.stats.uncompressed_bytes = buf.offset
            while not buf.eof:
                buf.fill(buf.available() + CHUNK_BYTES)
                buf.pos = len(buf.buf)
            self.stats.uncompressed_bytes = buf.base + len(buf.buf)
        finally:
            stream.close()

    # --- top level ---------------------------------------------------------------------------

    def _object(self, buf: _Buffer) -> Iterator[list[Event]]:
        seen_events = False
        while True:
            c = buf.peek()
            if c == ord("}"):
                buf.pos += 1
                break
            if c is None:
                raise self._error("the file ends inside the top-level object (truncated?)", buf.offset)
            key = self._value(buf)
            if not isinstance(key, str):
                raise self._error("expected a key string in the top-level object", buf.offset)
            if buf.peek() != ord(":"):
                raise self._error(f"expected ':' after key {key!r}", buf.offset)
            buf.pos += 1
            if key == "traceEvents":
                if buf.peek() != ord("["):
                    raise self._error("'traceEvents' is not an array", buf.offset)
                buf.pos += 1
                seen_events = True
                yield from self._events(buf, top_level=False)
            else:
                self.stats.metadata[key] = self._value(buf)
            c = buf.peek()
            if c == ord(","):
                buf.pos += 1
            elif c != ord("}"):
                if c is None:
                    raise self._error("the file ends inside the top-level object (truncated?)", buf.offset)
                raise self._error("expected ',' or '}' in the top-level object", buf.offset)
        if not seen_events:
            raise self._error("no 'traceEvents' array: not a torch.profiler / Chrome trace")

    def _value(self, buf: _Buffer) -> Any:
        """Decode one small JSON value exactly (keys and metadata values)."""
        want = 1 << 16
        while True:
            buf.skip_ws()
            buf.fill(want)
            text = bytes(buf.buf[buf.pos : buf.pos + want]).decode("utf-8", "surrogateescape")
            try:
                value, end = _SCANNER.raw_decode(text)
            except json.JSONDecodeError as exc:
                if want >= buf.available() and buf.eof:
                    if exc.pos >= len(text) - 1 or "Unterminated" in exc.msg:
                        raise self._error("the file ends inside a top-level value (truncated?)", buf.offset) from exc
                    raise self._error(f"malformed JSON ({exc.msg})", buf.offset + _nbytes(text, exc.pos)) from exc
                if want >= MAX_METADATA_BYTES:
                    raise self._error(
                        f"a top-level value is larger than {MAX_METADATA_BYTES >> 20} MB", buf.offset
                    ) from exc
                want *= 2
                continue
            except RecursionError as exc:
                raise self._error("JSON nested too deeply", buf.offset) from exc
            buf.pos += _nbytes(text, end)
            return value

    # --- the events array ----------------------------------------------------------------------

    def _events(self, buf: _Buffer, top_level: bool) -> Iterator[list[Event]]:
        c = buf.peek()
        if c == ord("]"):
            buf.pos += 1
            return
        while True:
            buf.fill(CHUNK_BYTES)
            if buf.peek() != ord("{"):
                if buf.peek() is None and top_level:
                    return  # Chrome allows the closing ']' of a bare array to be missing
                raise self._error("expected an event object", buf.offset, self.stats.events)
            cut = self._find_cut(buf)
            if cut is not None:
                piece_end, next_start = cut
                events = self._decode_piece(buf, piece_end)
                if events is not None:
                    buf.pos = next_start
                    yield events
                    # Raw fields of the events point into the buffer, which must not be resized
                    # while they live (fill() drops what was read): let them go first.
                    events = None
                    continue
                # The cut fell inside a value, or the piece is malformed: read it exactly.
                target = buf.base + piece_end
            else:
                if not buf.eof and buf.available() < MAX_EVENT_BYTES:
                    # No boundary in this window yet: widen it and look again.
                    buf.fill(buf.available() + CHUNK_BYTES)
                    continue
                # The last events of the array (or one huge event): the exact scanner reads them.
                target = buf.base + len(buf.buf)
            events, done = self._exact(buf, target, top_level)
            if events:
                yield events
            if done:
                return

    def _find_cut(self, buf: _Buffer) -> tuple[int, int] | None:
        """The last candidate event boundary in the window: (end of piece, start of next event)."""
        data = buf.buf
        lo = buf.pos
        j = data.rfind(b"}", lo, len(data))
        tries = 0
        while j > lo and tries < MAX_CUT_TRIES:
            m = _CUT.match(data, j)
            if m is not None:
                return j + 1, m.end() - 1
            j = data.rfind(b"}", lo, j)
            tries += 1
        return None

    def _decode_piece(self, buf: _Buffer, piece_end: int) -> list[Event] | None:
        # The bytes just before the piece and just after it are whitespace or ',': overwrite them
        # with '[' and ']' for the decode instead of copying the piece, then put them back.
        data = buf.buf
        lo = buf.pos - 1
        saved = (data[lo], data[piece_end])
        data[lo] = 0x5B
        data[piece_end] = 0x5D
        try:
            with memoryview(data) as view:
                return self._decode_view(view[lo : piece_end + 1])
        finally:
            data[lo], data[piece_end] = saved

    def _decode_view(self, piece: memoryview) -> list[Event] | None:
        try:
            events = self._decoder.decode(piece)
        except msgspec.ValidationError:
            # Valid JSON with an unexpected field type somewhere: rebuild those events leniently.
            try:
                raw = LENIENT_DECODER.decode(piece)
            except msgspec.DecodeError:
                return None
            events = self._lenient(raw)
        except msgspec.DecodeError:
            return None
        self.stats.events += len(events)
        return events

    def _lenient(self, raw: list[Any]) -> list[Event]:
        out = []
        for obj in raw:
            ev = event_from_dict(obj)
            if ev is None:
                self.stats.skipped_events += 1
            else:
                out.append(ev)
        return out

    def _exact(self, buf: _Buffer, target: int, top_level: bool) -> tuple[list[Event], bool]:
        """Read events one by one with the exact scanner until past ``target`` or the array's end.

        Returns the events and whether the array ended. Work is linear in the bytes read: the
        window is decoded to text once and walked by index, and the byte position advances by the
        UTF-8 length of each event's own text.
        """
        raw: list[Any] = []
        while True:
            text = bytes(buf.buf[buf.pos :]).decode("utf-8", "surrogateescape")
            ascii_text = text.isascii()
            n = len(text)
            base = buf.offset  # absolute byte offset of text[0]
            done_chars = 0  # text[:done_chars] is consumed (whole events and their separators)
            done_bytes = 0

            def at(chars: int) -> int:
                """Absolute byte offset of character index ``chars`` (chars >= done_chars)."""
                if ascii_text:
                    return base + chars
                return base + done_bytes + len(text[done_chars:chars].encode("utf-8", "surrogateescape"))

            i = 0
            while True:
                while i < n and text[i] in " \t\r\n":
                    i += 1
                if i >= n:
                    break
                index = self.stats.events + len(raw)
                if text[i] != "{":
                    raise self._error("expected an event object", at(i), index)
                try:
                    obj, j = _EVENT_SCANNER.raw_decode(text, i)
                except json.JSONDecodeError as exc:
                    if not buf.eof:
                        break  # the event continues past the window: read more
                    if exc.pos >= n - 1 or "Unterminated" in exc.msg:
                        raise self._error("the file ends inside an event (truncated trace?)", at(exc.pos), index) from exc
                    raise self._error(f"malformed JSON ({exc.msg})", at(exc.pos), index) from exc
                except RecursionError as exc:
                    raise self._error("JSON nested too deeply", at(i), index) from exc
                k = j
                while k < n and text[k] in " \t\r\n":
                    k += 1
                if k >= n and not buf.eof:
                    break  # cannot tell ',' from ']' yet: read this event again with more data
                raw.append(obj)
                if k < n and text[k] in ",]":
                    # Consume the event and its separator.
                    done_bytes = at(k + 1) - base
                    done_chars = k + 1
                    if text[k] == "]":
                        buf.pos = buf.pos + done_bytes
                        return self._finish_exact(raw), True
                    i = k + 1
                    if base + done_bytes >= target:
                        buf.pos = buf.pos + done_bytes
                        return self._finish_exact(raw), False
                    continue
                if k >= n and top_level:
                    buf.pos = buf.pos + (at(k) - base)
                    return self._finish_exact(raw), True
                if k >= n:
                    raise self._error("the file ends inside 'traceEvents' (truncated trace?)", at(k))
                raise self._error("expected ',' or ']' after an event", at(k), index)
            buf.pos = buf.pos + done_bytes
            if buf.eof:
                if top_level:
                    return self._finish_exact(raw), True
                raise self._error("the file ends inside 'traceEvents' (truncated trace?)", buf.offset)
            if raw:
                return self._finish_exact(raw), False
            if buf.available() >= MAX_EVENT_BYTES:
                raise self._error(f"an event is larger than {MAX_EVENT_BYTES >> 20} MB", buf.offset,
                                  self.stats.events)
            buf.fill(buf.available() + CHUNK_BYTES)

    def _finish_exact(self, raw: list[Any]) -> list[Event]:
        events = self._lenient(raw)
        self.stats.events += len(events)
        return events


def _nbytes(text: str, chars: int) -> int:
    """UTF-8 length of ``text[:chars]`` (the byte offset of a character index)."""
    prefix = text[:chars]
    if prefix.isascii():
        return len(prefix)
    return len(prefix.encode("utf-8", "surrogateescape"))


def read_metadata(path: str | Path) -> dict[str, Any]:
    """Read a whole trace and return only its top-level metadata (for tests and tools)."""
    reader = TraceReader(path)
    for _chunk in reader.chunks():
        pass
    return reader.stats.metadata
