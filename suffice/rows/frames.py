"""Results where users analyse them: what ``judge_batch`` returns is a list of results that also turns into an Arrow
table or a pandas DataFrame, with the typed columns a Parquet output has (:func:`~suffice.rows.tables.result_schema`:
the verdict a struct of the gate's verdict model), one row per result as ``suffice judge`` writes it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from suffice.exceptions import ConfigError, MissingExtraError
from suffice.formats.files.parquet import escape
from suffice.formats.verdicts import DEFAULT_VERDICT_FORMAT
from suffice.gates.base import Gate
from suffice.results import JudgeResult
from suffice.rows.shaping import result_row
from suffice.serving.extras import require


class Results(list[JudgeResult[Any]]):
    """One result per record, in order (a ``list``), read by ``gate`` (the verdicts' model and format)."""

    def __init__(self, results: Iterable[JudgeResult[Any]], gate: Gate | None) -> None:
        super().__init__(results)
        #: ``None`` where the gate cannot be built here (a client's, reading a rubric only the service holds).
        self.gate = gate

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled (to another process: a Ray actor's answer) as a plain list: a gate holds what cannot travel."""
        return (list, (list(self),))

    def to_arrow(self) -> Any:
        """A ``pyarrow.Table``: a row per result (``line`` its 1-based position), typed as the Parquet writer types
        them.  Needs pyarrow (``suffice[parquet]``)."""
        if self.gate is None:
            raise ConfigError("gate", None, "these results' gate cannot be built here, so their rows cannot be typed")
        require(("pyarrow",), "to_arrow()")
        import pyarrow as pa

        from suffice.rows.tables import coerce_row, result_schema

        schema = result_schema(self.gate.verdict_model)
        rows = [
            coerce_row(escape(result_row(result, self.gate, DEFAULT_VERDICT_FORMAT, line)), schema)
            for line, result in enumerate(self, start=1)
        ]
        return pa.Table.from_pylist(rows, schema=schema)

    def to_pandas(self) -> Any:
        """A ``pandas.DataFrame`` of :meth:`to_arrow`'s table.  Needs pandas, which suffice does not install."""
        try:
            import pandas  # noqa: F401
        except ImportError:
            raise MissingExtraError(
                "pandas", (), "to_pandas() needs pandas, which is not installed: pip install pandas (or to_arrow())"
            ) from None
        return self.to_arrow().to_pandas()
