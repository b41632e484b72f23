"""The write-behind log's record payload: an explicit, versioned encoding of one write's rows.

A record can outlive the code that wrote it: a graph killed with writes still logged may next
start under an upgraded keymem. So a payload's first byte is its format, and the rest (format
2) is a msgpack map whose fields go by name: the header (``epoch``, ``lsn``, ``head_seq``) and
every field of ``store.changes.Changes``, each encoded as its declared type says. A row (a
memory, a key, a link, an alias, an outcome) is a list of values under its class's field names,
written once per record, so a record reads by name whatever the class has gained since (a
field the record lacks takes its default). A field or a format this code does not know is
refused (``LogFormatError``), never guessed. Rows keyed by ``id`` (memories, keys) are written
once per record and named by id where ``Changes`` lists them (a new memory is in three of its
maps).

Format 1 pickled ``(epoch, lsn, head_seq, Changes)``; its records are read too, field by
field, so the log a previous keymem left is still folded.
"""

from __future__ import annotations

import dataclasses
import pickle
import types
import typing
from collections.abc import Callable
from operator import attrgetter
from typing import Any

import msgpack
import numpy as np

from keymem.store.changes import Changes

FORMAT = 2
PICKLE_FORMAT = 1
PICKLE_MARK = 0x80  # a pickle's first byte (protocol 2 and later): a format-1 record
VECTOR_DTYPE = "<f4"
SCALARS = (str, int, float, bool, bytes, type(None))
HEADER_FIELDS = ("epoch", "lsn", "head_seq")


class LogFormatError(ValueError):
    """A record this keymem cannot read: another format, or a field it does not know."""


class _Context:
    """One record's rows while it is encoded or decoded: each row class's field names as
    written, and the rows keyed by id (encoded rows, or decoded records)."""

    def __init__(
        self, names: dict[str, list[str]] | None = None, by_id: dict[str, Any] | None = None
    ) -> None:
        self.names: dict[str, list[str]] = names if names is not None else {}
        self.by_id: dict[str, dict[str, Any]] = by_id if by_id is not None else {}
        # per row class read: whether its rows were written with this code's field names
        self.current: dict[str, bool] = {}


Encode = Callable[[Any, _Context], Any]
Decode = Callable[[Any, _Context], Any]
# (encode, decode) of a declared type; None: the value goes as it is
Plan = tuple[Encode | None, Decode | None]


def _plan(hint: Any) -> Plan:
    """How values of the declared type ``hint`` are written and read back."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint in SCALARS:
        return None, None
    if origin in (types.UnionType, typing.Union) and all(arg in SCALARS for arg in args):
        return None, None
    if hint is np.ndarray:
        return (
            lambda v, _: np.ascontiguousarray(v, dtype=VECTOR_DTYPE).tobytes(),
            lambda raw, _: np.frombuffer(raw, dtype=VECTOR_DTYPE).copy(),
        )
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _row_plan(hint)
    if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
        return _tuple_plan([_plan(arg) for arg in args])
    if origin in (list, set, tuple):
        return _sequence_plan(origin, _plan(args[0]))
    if origin is dict:
        value_hint = args[1]
        if args[0] is str and _keyed_by_id(value_hint):
            return _by_id_plan(value_hint)
        return _dict_plan(_plan(args[0]), _plan(value_hint))
    raise TypeError(f"the write log has no encoding for {hint}")


def _convert(plan: Encode | Decode | None, value: Any, context: _Context) -> Any:
    return value if plan is None else plan(value, context)


def _tuple_plan(plans: list[Plan]) -> Plan:
    if all(enc is None and dec is None for enc, dec in plans):
        return (lambda v, _: list(v)), (lambda raw, _: tuple(raw))
    return (
        lambda v, c: [_convert(e, x, c) for x, (e, _) in zip(v, plans, strict=True)],
        lambda raw, c: tuple(_convert(d, x, c) for x, (_, d) in zip(raw, plans, strict=True)),
    )


def _sequence_plan(origin: type, plan: Plan) -> Plan:
    enc, dec = plan
    if enc is None and dec is None:
        return (lambda v, _: list(v)), (lambda raw, _: origin(raw))
    return (
        lambda v, c: [_convert(enc, x, c) for x in v],
        lambda raw, c: origin(_convert(dec, x, c) for x in raw),
    )


def _dict_plan(key: Plan, value: Plan) -> Plan:
    (key_enc, key_dec), (value_enc, value_dec) = key, value
    return (
        lambda v, c: [[_convert(key_enc, k, c), _convert(value_enc, x, c)] for k, x in v.items()],
        lambda raw, c: {_convert(key_dec, k, c): _convert(value_dec, x, c) for k, x in raw},
    )


def _keyed_by_id(hint: Any) -> bool:
    return (
        isinstance(hint, type)
        and dataclasses.is_dataclass(hint)
        and "id" in {f.name for f in dataclasses.fields(hint)}
    )


def _by_id_plan(cls: type) -> Plan:
    """A map id -> record: its ids, each record's row once in the record's table."""
    row_enc, row_dec = _row_plan(cls)
    name = cls.__name__

    def encode(mapping: dict[str, Any], context: _Context) -> list[str]:
        table = context.by_id.setdefault(name, {})
        for record_id, record in mapping.items():
            if record_id not in table:
                table[record_id] = row_enc(record, context)
        return list(mapping)

    def decode(ids: list[str], context: _Context) -> dict[str, Any]:
        table = context.by_id.get(name, {})
        decoded: dict[str, Any] = {}
        for record_id in ids:
            row = table.get(record_id)
            if row is None:
                raise LogFormatError(f"{name} {record_id} is named but not written")
            if isinstance(row, list):  # the first field to name it reads it
                row = table[record_id] = row_dec(row, context)
            decoded[record_id] = row
        return decoded

    return encode, decode


def _row_plan(cls: type) -> tuple[Encode, Decode]:
    """A record as the list of its field values; its field names once per log record."""
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    plans = {n: _plan(hints[n]) for n in names}
    converted = [(i, enc) for i, n in enumerate(names) if (enc := plans[n][0]) is not None]
    restored = [(i, dec) for i, n in enumerate(names) if (dec := plans[n][1]) is not None]
    getter = attrgetter(*names)
    class_name = cls.__name__

    def encode(record: Any, context: _Context) -> list[Any]:
        if class_name not in context.names:
            context.names[class_name] = names
        row = list(getter(record))
        for i, enc in converted:
            row[i] = enc(row[i], context)
        return row

    def decode(row: list[Any], context: _Context) -> Any:
        current = context.current.get(class_name)
        if current is None:
            written = context.names.get(class_name)
            if written is None:
                raise LogFormatError(f"{class_name} rows without their field names")
            unknown = [n for n in written if n not in plans]
            if unknown:
                raise LogFormatError(f"{class_name} fields this keymem does not know: {unknown}")
            current = context.current[class_name] = written == names
        if current and len(row) == len(names):  # the common case: positions are the names
            for i, dec in restored:
                row[i] = dec(row[i], context)
            return cls(*row)
        written = context.names[class_name]
        if len(written) != len(row):
            raise LogFormatError(f"a {class_name} row does not match its field names {written}")
        return cls(
            **{n: _convert(plans[n][1], v, context) for n, v in zip(written, row, strict=True)}
        )

    return encode, decode


_CHANGES_HINTS = typing.get_type_hints(Changes)
_CHANGES_PLANS = {f.name: _plan(_CHANGES_HINTS[f.name]) for f in dataclasses.fields(Changes)}


def encode(epoch: str, lsn: int, head_seq: int, changes: Changes) -> bytes:
    """A record's payload: the format byte, then the header and ``changes`` by field name."""
    context = _Context()
    fields = {
        name: _convert(enc, getattr(changes, name), context)
        for name, (enc, _) in _CHANGES_PLANS.items()
    }
    body = {
        "epoch": epoch,
        "lsn": lsn,
        "head_seq": head_seq,
        "changes": fields,
        "names": context.names,
        "rows": context.by_id,
    }
    return bytes([FORMAT]) + msgpack.packb(body, use_bin_type=True)


def decode(payload: bytes) -> tuple[str, int, int, Changes]:
    """``(epoch, lsn, head_seq, changes)`` of a record of any format this keymem reads."""
    version = format_of(payload)
    if version == PICKLE_FORMAT:
        return _decode_pickle(payload)
    if version != FORMAT:
        raise LogFormatError(f"format {version}; this keymem reads formats 1 and {FORMAT}")
    try:
        body = msgpack.unpackb(payload[1:], raw=False, strict_map_key=False)
        context = _Context(body["names"], body["rows"])
        header = [body[name] for name in HEADER_FIELDS]
        written = body["changes"]
    except (ValueError, KeyError, TypeError, msgpack.UnpackException) as exc:
        raise LogFormatError(f"a damaged format-{FORMAT} record: {exc}") from exc
    unknown = [name for name in written if name not in _CHANGES_PLANS]
    if unknown:
        raise LogFormatError(f"change fields this keymem does not know: {unknown}")
    changes = Changes(
        **{name: _convert(_CHANGES_PLANS[name][1], v, context) for name, v in written.items()}
    )
    epoch, lsn, head_seq = header
    return str(epoch), int(lsn), int(head_seq), changes


def format_of(payload: bytes) -> int:
    """A payload's format: its first byte, or 1 for a pickle."""
    if not payload:
        raise LogFormatError("an empty record")
    return PICKLE_FORMAT if payload[0] == PICKLE_MARK else payload[0]


def _decode_pickle(payload: bytes) -> tuple[str, int, int, Changes]:
    """A format-1 record, its ``Changes`` read field by field (a field added since takes its
    default)."""
    try:
        epoch, lsn, head_seq, pickled = pickle.loads(payload)
        state = vars(pickled)
        unknown = [name for name in state if name not in _CHANGES_PLANS]
        if unknown:
            raise LogFormatError(f"change fields this keymem does not know: {unknown}")
        # written again as format 2 and read back: a row missing a field fails here, not later
        return decode(encode(str(epoch), int(lsn), int(head_seq), Changes(**state)))
    except LogFormatError:
        raise
    except Exception as exc:  # a class renamed or changed since, a damaged pickle
        raise LogFormatError(f"a format-1 record: {type(exc).__name__}: {exc}") from exc
