"""Result rows as Parquet with a typed schema.

The verdict is a struct column of the verdict model's own fields, so queries filter on it without parsing JSON.
The schema is derived from the pydantic models (:func:`arrow_type`), never guessed from the data.  Chunk ids
(``int | str``) are written as strings, marked with ``suffice.json_type = int|str``.
"""

from __future__ import annotations

import contextlib
import os
import types
import typing
from collections.abc import Iterable, Iterator, Mapping
from enum import Enum
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel

from suffice.files import open_temporary_beside, sync_folder
from suffice.results import JudgeResult

__all__ = [
    "JSON_TYPE_KEY",
    "ParquetRows",
    "RowError",
    "arrow_type",
    "coerce_row",
    "iter_parquet",
    "parquet_rows",
    "result_schema",
    "row_from_arrow",
]

#: Field metadata key marking a string column that holds ``int | str`` values.
JSON_TYPE_KEY = b"suffice.json_type"
_INT_OR_STR = {JSON_TYPE_KEY: b"int|str"}

_UNIONS = (typing.Union, types.UnionType)
_LISTS = (list, tuple, set, frozenset)
_SCALARS: dict[type, Any] = {str: pa.string(), bool: pa.bool_(), int: pa.int64(), float: pa.float64()}


class RowError(ValueError):
    """A row does not fit the schema; ``key`` is the dotted path of the offending key."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


# --- annotations to Arrow types -------------------------------------------------------


def _unwrap(annotation: Any) -> Any:
    """Strip ``Annotated`` down to the type it annotates."""
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _split_optional(annotation: Any) -> tuple[Any, bool]:
    """``X | None`` → ``(X, True)``; anything else → ``(annotation, False)``."""
    annotation = _unwrap(annotation)
    if typing.get_origin(annotation) in _UNIONS:
        members = [_unwrap(m) for m in typing.get_args(annotation)]
        rest = [m for m in members if m is not type(None)]
        if len(rest) < len(members):
            if len(rest) == 1:
                return rest[0], True
            return typing.Union[tuple(rest)], True  # noqa: UP007 - built from a runtime tuple
    return annotation, False


def _is_int_or_str(annotation: Any) -> bool:
    """A union whose members are ``int`` and ``str`` (like ``ChunkId``)."""
    return typing.get_origin(annotation) in _UNIONS and {_unwrap(m) for m in typing.get_args(annotation)} == {int, str}


def _field(name: str, annotation: Any, stack: tuple[type, ...]) -> Any:
    """The Arrow field for a value of ``annotation``: nullable exactly when it admits ``None``."""
    inner, nullable = _split_optional(annotation)
    metadata = _INT_OR_STR if _is_int_or_str(inner) else None
    return pa.field(name, _arrow_type(inner, stack), nullable=nullable, metadata=metadata)


def _struct(model: type[BaseModel], stack: tuple[type, ...]) -> Any:
    if model in stack:
        raise TypeError(f"{model.__name__} refers to itself; Arrow has no recursive types")
    stack = (*stack, model)
    fields = [_field(name, info.annotation, stack) for name, info in model.model_fields.items()]
    fields += [_field(name, info.return_type, stack) for name, info in model.model_computed_fields.items()]
    return pa.struct(fields)


def _arrow_type(annotation: Any, stack: tuple[type, ...]) -> Any:
    annotation, optional = _split_optional(annotation)
    if optional:
        return _arrow_type(annotation, stack)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    plain = origin is None and isinstance(annotation, type)  # a class, not list[X] and the like
    if plain and annotation in _SCALARS:
        return _SCALARS[annotation]
    if plain and issubclass(annotation, BaseModel):
        return _struct(annotation, stack)
    if plain and issubclass(annotation, Enum):
        if all(isinstance(member.value, str) for member in annotation):
            return pa.string()
    elif origin is Literal:
        for kind in (bool, str, int):  # bool before int: True is an int too
            if all(type(value) is kind for value in args):
                return _SCALARS[kind]
    elif _is_int_or_str(annotation):
        return pa.string()
    elif origin in _LISTS and args:
        items = args[:1] if origin is tuple and len(args) == 2 and args[1] is Ellipsis else args
        if len({_unwrap(a) for a in items}) == 1:
            return pa.list_(_field("item", items[0], stack))
    elif origin in (dict, Mapping) and len(args) == 2:
        key, value = _split_optional(args[0])
        if not value and key is str:
            return pa.map_(pa.field("key", pa.string(), nullable=False), _field("value", args[1], stack))
    raise TypeError(f"no Arrow type for {annotation!r}: give the field a concrete type")


def arrow_type(annotation: Any) -> Any:
    """The Arrow type of a pydantic field annotation (its JSON-mode dump): scalars, lists, ``dict[str, X]``
    maps, models as structs, ``Literal``/``Enum`` as their scalar, ``int | str`` as ``string``.  Anything
    else (``Any``, other unions) raises :class:`TypeError` naming it.
    """
    return _arrow_type(annotation, ())


def result_schema(verdict_model: type[BaseModel]) -> Any:
    """The schema of a result row: :class:`~suffice.results.JudgeResult`'s columns (no ``raw_text``, nor the fields
    never dumped: ``fence``, ``attempts``; ``verdict`` a struct of ``verdict_model``), then ``line``, the 1-based
    input position."""
    if not (isinstance(verdict_model, type) and issubclass(verdict_model, BaseModel)):
        raise TypeError(f"verdict_model must be a pydantic model class, not {verdict_model!r}")
    fields = []
    for name, info in JudgeResult.model_fields.items():
        if name == "raw_text" or info.exclude:  # result_row leaves raw_text out; the others are never dumped
            continue
        annotation = verdict_model | None if name == "verdict" else info.annotation
        fields.append(_field(name, annotation, ()))
    fields.append(pa.field("line", pa.int64(), nullable=False))
    metadata = {b"suffice.verdict_model": verdict_model.__name__.encode()}
    omitted = getattr(verdict_model, "omitted_when_none", ())
    if omitted:  # the verdict's JSON leaves these out while null: so does reading the file back
        metadata[_OMITTED_KEY] = ",".join(omitted).encode()
    return pa.schema(fields, metadata=metadata)


#: Schema metadata: the verdict fields a row read back leaves out while null, comma-separated.
_OMITTED_KEY = b"suffice.verdict_omitted_when_null"


def _without_omitted(row: dict[str, Any], omitted: tuple[str, ...]) -> dict[str, Any]:
    verdict = row.get("verdict")
    if isinstance(verdict, dict):
        row["verdict"] = {k: v for k, v in verdict.items() if v is not None or k not in omitted}
    return row


# --- rows to Arrow --------------------------------------------------------------------


def _describe(value: object) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def _coerce(value: Any, field: Any, key: str) -> Any:
    if value is None:
        if not field.nullable:
            raise RowError(key, "is required (null or missing)")
        return None
    kind = field.type
    if pa.types.is_struct(kind) or pa.types.is_map(kind):
        if not isinstance(value, Mapping):
            raise RowError(key, f"must be an object, not {_describe(value)}")
        if pa.types.is_struct(kind):
            return _coerce_struct(value, kind, key)
        for k in value:
            if not isinstance(k, str):
                raise RowError(key, f"map keys must be strings, not {_describe(k)}")
        return [(k, _coerce(v, kind.item_field, f"{key}.{k}")) for k, v in value.items()]
    if pa.types.is_list(kind):
        if not isinstance(value, list | tuple):
            raise RowError(key, f"must be a list, not {_describe(value)}")
        return [_coerce(v, kind.value_field, f"{key}[{i}]") for i, v in enumerate(value)]
    return _coerce_scalar(value, field, key)


def _coerce_scalar(value: Any, field: Any, key: str) -> Any:
    kind = field.type
    if pa.types.is_string(kind):
        if isinstance(value, str):
            return value
        int_or_str = (field.metadata or {}).get(JSON_TYPE_KEY) == _INT_OR_STR[JSON_TYPE_KEY]
        if int_or_str and isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        raise RowError(key, f"must be a string, not {_describe(value)}")
    if pa.types.is_boolean(kind):
        if isinstance(value, bool):
            return value
        raise RowError(key, f"must be a boolean, not {_describe(value)}")
    if pa.types.is_integer(kind):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise RowError(key, f"must be an integer, not {_describe(value)}")
    if pa.types.is_floating(kind):
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise RowError(key, f"must be a number, not {_describe(value)}")
    raise RowError(key, f"has Arrow type {kind}, which rows of JSON values cannot fill")


def _coerce_struct(value: Mapping[str, Any], kind: Any, key: str) -> dict[str, Any]:
    names = {child.name for child in kind}
    for name in value:
        if name not in names:
            raise RowError(f"{key}.{name}", f"is not a field of the schema (expected some of {sorted(names)})")
    return {child.name: _coerce(value.get(child.name), child, f"{key}.{child.name}") for child in kind}


def coerce_row(row: Mapping[str, Any], schema: Any) -> dict[str, Any]:
    """``row`` (JSON values) in the form Arrow takes for ``schema``.  Raises :class:`RowError` naming the
    dotted key of an unknown key, a missing or null required value, or a value of the wrong type."""
    names = set(schema.names)
    for name in row:
        if name not in names:
            raise RowError(name, f"is not a column of the schema (columns: {', '.join(schema.names)})")
    return {field.name: _coerce(row.get(field.name), field, field.name) for field in schema}


# --- Arrow back to rows ---------------------------------------------------------------


def _has_map(kind: Any) -> bool:
    if pa.types.is_map(kind):
        return True
    if pa.types.is_struct(kind):
        return any(_has_map(child.type) for child in kind)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        return _has_map(kind.value_type)
    return False


def _from_arrow(value: Any, kind: Any) -> Any:
    if value is None or not _has_map(kind):
        return value
    if pa.types.is_map(kind):
        return {k: _from_arrow(v, kind.item_type) for k, v in value}
    if pa.types.is_struct(kind):
        return {name: _from_arrow(child, kind.field(name).type) for name, child in value.items()}
    return [_from_arrow(v, kind.value_type) for v in value]


def row_from_arrow(row: Mapping[str, Any], schema: Any) -> dict[str, Any]:
    """A row as ``to_pylist`` gives it, with map values (lists of pairs) as dicts, at any depth."""
    return {name: _from_arrow(value, schema.field(name).type) for name, value in row.items()}


def iter_parquet(path: str | os.PathLike[str], batch_rows: int = 4096) -> Iterator[dict[str, Any]]:
    """Every row of a Parquet file as a plain dict, ``batch_rows`` rows in memory at a time."""
    if batch_rows < 1:
        raise ValueError(f"batch_rows must be at least 1, not {batch_rows}")
    with pq.ParquetFile(path) as file:
        schema = file.schema_arrow
        maps = any(_has_map(field.type) for field in schema)
        listed = (schema.metadata or {}).get(_OMITTED_KEY, b"").decode()
        omitted = tuple(name for name in listed.split(",") if name)
        for batch in file.iter_batches(batch_size=batch_rows):
            for row in batch.to_pylist():
                row = row_from_arrow(row, schema) if maps else row
                yield _without_omitted(row, omitted) if omitted else row


def parquet_rows(path: str | os.PathLike[str]) -> int:
    """The number of rows in a Parquet file, from its footer (no data is read)."""
    return int(pq.read_metadata(path).num_rows)


# --- the writer -----------------------------------------------------------------------


class ParquetRows:
    """Writes rows to ``path`` under ``schema`` in row groups of ``row_group_rows``, via a temporary beside it
    (:func:`~suffice.files.temporary_beside`) renamed into place by :meth:`close`; an exception inside ``with``
    discards it (:meth:`abort`)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        schema: Any,
        *,
        row_group_rows: int = 10_000,
        compression: str = "zstd",
        private: bool = False,
    ) -> None:
        """``private``: a new file is mode 0600 (it holds records), as :func:`~suffice.files.file_mode` says."""
        if row_group_rows < 1:
            raise ValueError(f"row_group_rows must be at least 1, not {row_group_rows}")
        self.path = Path(path)
        # pyarrow writes into this handle and leaves it open for close() to sync.
        self._sink, self.tmp_path = open_temporary_beside(self.path, private=private)
        self.schema = schema
        self.row_group_rows = row_group_rows
        #: Rows in the row groups written so far (rows still buffered not included).
        self.rows_written = 0
        self._buffer: list[dict[str, Any]] = []
        try:
            self._writer: Any = pq.ParquetWriter(self._sink, schema, compression=compression)
        except BaseException:
            self._sink.close()
            self.tmp_path.unlink(missing_ok=True)
            raise
        self._closed = False

    def write(self, rows: Iterable[Mapping[str, Any]]) -> int:
        """Check and buffer ``rows``, writing each full row group; the number taken."""
        if self._closed:
            raise ValueError(f"{self.path} is closed")
        taken = 0
        for row in rows:
            self._buffer.append(coerce_row(row, self.schema))
            taken += 1
            if len(self._buffer) >= self.row_group_rows:
                self._flush()
        return taken

    def _flush(self) -> None:
        if not self._buffer:
            return
        table = pa.Table.from_pylist(self._buffer, schema=self.schema)
        self._writer.write_table(table, row_group_size=self.row_group_rows)
        self.rows_written += len(self._buffer)
        self._buffer = []

    def close(self) -> None:
        """Write what is buffered, finish the file and move it into place."""
        if self._closed:
            return
        try:
            self._flush()
            self._writer.close()
            self._sink.flush()
            os.fsync(self._sink.fileno())  # on disk before it replaces anything
            self._sink.close()
            os.replace(self.tmp_path, self.path)
            sync_folder(self.path.parent)
        except BaseException:
            self.abort()
            raise
        self._closed = True

    def abort(self) -> None:
        """Drop the temporary file; ``path`` is left as it was."""
        if self._closed:
            return
        self._closed = True
        self._buffer = []
        # The writer may be broken by what caused the abort; the file goes either way.
        with contextlib.suppress(Exception):
            self._writer.close()
        with contextlib.suppress(OSError):
            self._sink.close()
        self.tmp_path.unlink(missing_ok=True)

    def __enter__(self) -> ParquetRows:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
