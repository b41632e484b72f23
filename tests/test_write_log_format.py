"""The write-behind log's record format (store/logformat.py): a record read by a later keymem.

What a user would notice if it went wrong: a graph killed with writes still logged, then
upgraded, either loses those acknowledged writes, or does not start with a traceback instead of
saying which file holds them and what to do.
"""

from __future__ import annotations

import dataclasses
import pickle
import types
import typing
import zlib
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest

from keymem.services.graph import GraphService
from keymem.store import logformat
from keymem.store.changes import Changes
from keymem.store.writelog import HEADER, UnreadableLog, log_path
from tests.graph_helpers import GRAPH_FILE, open_graph, table_counts
from tests.vectors import remember_body


def _logged_writes(home: Path, count: int) -> list[str]:
    """``count`` acknowledged remembers left only in the log, as kill -9 leaves them."""
    graph = open_graph(home)
    saved = [
        graph.remember(remember_body(f"logged fact {i}", ["logged", f"fact{i}"]))["saved"]
        for i in range(count)
    ]
    graph.store.conn.close()
    graph.store.log.close()
    return saved


def _payloads(home: Path) -> list[bytes]:
    data = log_path(home / GRAPH_FILE).read_bytes()
    payloads, offset = [], 0
    while offset < len(data):
        length, _ = HEADER.unpack_from(data, offset)
        payloads.append(data[offset + HEADER.size : offset + HEADER.size + length])
        offset += HEADER.size + length
    return payloads


def _rewrite(home: Path, payloads: list[bytes]) -> None:
    framed = b"".join(HEADER.pack(len(p), zlib.crc32(p)) + p for p in payloads)
    log_path(home / GRAPH_FILE).write_bytes(framed)


def _as_format_1(payload: bytes) -> bytes:
    """The record as the keymem before the explicit format wrote it."""
    return pickle.dumps(logformat.decode(payload), protocol=pickle.HIGHEST_PROTOCOL)


def test_writes_logged_by_the_previous_format_are_folded(tmp_path: Path) -> None:
    saved = _logged_writes(tmp_path, 3)
    _rewrite(tmp_path, [_as_format_1(p) for p in _payloads(tmp_path)])
    assert all(logformat.format_of(p) == 1 for p in _payloads(tmp_path))
    graph = open_graph(tmp_path)
    try:
        assert graph.get_memories({"ids": saved})["missing"] == []
    finally:
        graph.close()
    assert table_counts(tmp_path / GRAPH_FILE)["memories"] == 3


def _refused(home: Path) -> UnreadableLog:
    log_file = log_path(home / GRAPH_FILE)
    logged = log_file.read_bytes()
    with pytest.raises(UnreadableLog) as refused:
        GraphService(home / GRAPH_FILE)
    assert log_file.read_bytes() == logged  # nothing cut off, nothing set aside
    assert str(log_file) in refused.value.message
    return refused.value


def test_a_record_of_an_unknown_format_is_refused_naming_the_file(tmp_path: Path) -> None:
    _logged_writes(tmp_path, 2)
    first, second = _payloads(tmp_path)
    _rewrite(tmp_path, [first, bytes([logformat.FORMAT + 1]) + second[1:]])
    refused = _refused(tmp_path)
    assert refused.detail["format"] == logformat.FORMAT + 1
    assert "move graph.writes aside" in refused.message


def _edited(payload: bytes, edit: str) -> bytes:
    body = msgpack.unpackb(payload[1:], raw=False, strict_map_key=False)
    if edit == "new change field":
        body["changes"]["added_later"] = []
    elif edit == "new row field":
        body["names"]["MemoryRecord"] = [*body["names"]["MemoryRecord"], "added_later"]
        for row in body["rows"]["MemoryRecord"].values():
            row.append(1)
    elif edit == "fields gone":  # written before these fields existed
        del body["changes"]["outcomes"]
        names = body["names"]["MemoryRecord"]
        at = names.index("near_duplicates")
        body["names"]["MemoryRecord"] = names[:at] + names[at + 1 :]
        for row in body["rows"]["MemoryRecord"].values():
            del row[at]
    return bytes([logformat.FORMAT]) + msgpack.packb(body, use_bin_type=True)


@pytest.mark.parametrize("edit", ["new change field", "new row field"])
def test_a_record_with_a_field_this_keymem_does_not_know_is_refused(
    tmp_path: Path, edit: str
) -> None:
    _logged_writes(tmp_path, 1)
    _rewrite(tmp_path, [_edited(p, edit) for p in _payloads(tmp_path)])
    assert "added_later" in _refused(tmp_path).message


def test_a_record_written_before_a_field_existed_reads_with_its_default(tmp_path: Path) -> None:
    saved = _logged_writes(tmp_path, 2)
    _rewrite(tmp_path, [_edited(p, "fields gone") for p in _payloads(tmp_path)])
    graph = open_graph(tmp_path)
    try:
        assert graph.get_memories({"ids": saved})["missing"] == []
    finally:
        graph.close()


def _sample(hint: Any, tag: str) -> Any:
    """A value of the declared type ``hint`` with nothing left at its default."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        return _sample(next(a for a in args if a is not type(None)), tag)
    if hint is np.ndarray:
        return np.arange(4, dtype=np.float32) / 7
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        hints = typing.get_type_hints(hint)
        return hint(
            **{f.name: _sample(hints[f.name], f"{tag}.{f.name}") for f in dataclasses.fields(hint)}
        )
    if origin is dict:
        return {_sample(args[0], f"{tag}.key"): _sample(args[1], tag)}
    if origin is tuple:
        items = [args[0]] * 2 if args[-1] is Ellipsis else list(args)
        return tuple(_sample(a, f"{tag}.{i}") for i, a in enumerate(items))
    if origin in (list, set):
        return origin([_sample(args[0], tag)])
    samples = {str: tag, int: 7, float: 2.5, bool: True, bytes: tag.encode()}
    return samples[hint]


def test_every_field_of_a_write_survives_the_encoding() -> None:
    """Every field of ``Changes``, with every row field set, comes back from a record equal: a
    field added to ``Changes`` (or a row class) with a type the log cannot write fails at
    import (``logformat._plan``), one it writes wrongly fails the comparison here."""
    hints = typing.get_type_hints(Changes)
    written = Changes(
        **{f.name: _sample(hints[f.name], f.name) for f in dataclasses.fields(Changes)}
    )
    assert all(getattr(written, f.name) for f in dataclasses.fields(Changes))
    epoch, lsn, head_seq, read = logformat.decode(logformat.encode("epoch", 5, 9, written))
    assert (epoch, lsn, head_seq) == ("epoch", 5, 9)
    for spec in dataclasses.fields(Changes):
        assert _comparable(getattr(read, spec.name)) == _comparable(getattr(written, spec.name)), (
            spec.name
        )


def _comparable(value: object) -> object:
    """Rows as maps of their fields, vectors as bytes (arrays do not compare with ``==``)."""
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_comparable(v) for v in value)
    if dataclasses.is_dataclass(value):
        return {f.name: _comparable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, np.ndarray):
        return (value.dtype.str, value.tobytes())
    return value
