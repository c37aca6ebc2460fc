"""What a file's bytes are, from their first bytes alone, for input that has no name to go
by (stdin): a .uop file is a MessagePack map or JSON text (uop-format-v1.md), an ONNX
model a protobuf message; anything else is described in a few words for an error line.
Imports nothing: the .uop route stays as fast as a path's."""

from __future__ import annotations

_WHITESPACE = b" \t\r\n"
# first bytes of a MessagePack map and array (fixmap, map16, map32; fixarray, array16, array32)
MSGPACK_MAP = frozenset(range(0x80, 0x90)) | {0xDE, 0xDF}
MSGPACK_ARRAY = frozenset(range(0x90, 0xA0)) | {0xDC, 0xDD}


def looks_like_uop(data: bytes) -> bool:
    """Whether the .uop reader should have these bytes (and say what is wrong with them if
    they are damaged): a MessagePack map, or JSON text that starts with `{` or `[` after
    whitespace or a byte-order mark. Empty input too (the reader's 'empty file')."""
    text = data.lstrip(_WHITESPACE)
    if not text:
        return True
    if text.startswith(b"\xef\xbb\xbf"):  # a BOM before JSON: the reader names it
        text = text[3:].lstrip(_WHITESPACE)
    return text[:1] in (b"{", b"[") or data[0] in MSGPACK_MAP


def looks_like_onnx(data: bytes) -> bool:
    """An ONNX ModelProto as every writer writes it: field 1 (ir_version, a varint) first."""
    return data[:1] == b"\x08"


_MAGIC = ((b"PK\x03\x04", "a zip archive (an .npz?)"), (b"PK\x05\x06", "an empty zip archive"),
          (b"\x93NUMPY", "a .npy array"), (b"\x1f\x8b", "gzip-compressed data"), (b"\x89PNG", "a PNG image"),
          (b"%PDF", "a PDF document"), (b"\x7fELF", "an executable"))


def describe(data: bytes) -> str:
    """A few words on what `data` looks like: `an ONNX model`, `a zip archive (an .npz?)`,
    `text starting 'digraph G {'`, `binary data starting 00 ff 12 7a`."""
    if not data:
        return "empty"
    if looks_like_onnx(data):
        return "protobuf starting as an ONNX model does (ir_version first)"
    for magic, what in _MAGIC:
        if data.startswith(magic):
            return what
    head = data[:24]
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as e:  # a character cut at the 24th byte is still text
        text = head[:e.start].decode("utf-8") if e.start >= len(head) - 3 and e.start > 0 else None
    if text and all(ch.isprintable() or ch in "\t\r\n" for ch in text):
        shown = " ".join(text.split())
        return f"text starting {shown!r}" + ("..." if len(data) > len(head) else "")
    return f"binary data starting {data[:8].hex(' ')}"
