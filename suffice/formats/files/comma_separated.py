"""``csv``: comma-separated values with a header line (``suffice audit export --format csv``): structured values
as JSON text, ``None`` as an empty cell, text UTF-8 cannot hold as ``\\udcXX`` escapes.  Rows only go out in it: a
batch run's records and rows are nested, which CSV holds only as text.  A text cell a spreadsheet would evaluate as
a formula (OWASP's CSV injection rule: it starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return, or
their full-width forms) is written with a leading ``'``, so opening an export runs nothing an input wrote."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any


class CommaSeparated:
    name = "csv"

    def lines(self, rows: Iterable[Mapping[str, Any]], columns: Sequence[str]) -> Iterator[bytes]:
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\r\n")

        def line(values: Iterable[Any]) -> bytes:
            buffer.seek(0)
            buffer.truncate()
            writer.writerow(values)
            return buffer.getvalue().encode("utf-8", "backslashreplace")

        yield line(columns)
        for row in rows:
            yield line(_cell(row.get(name)) for name in columns)


#: What a spreadsheet reads as the start of a formula (Excel, LibreOffice, Google Sheets).
FORMULA_STARTS = tuple("=+-@\t\r\uff1d\uff0b\uff0d\uff20")


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


COMMA_SEPARATED = CommaSeparated()
