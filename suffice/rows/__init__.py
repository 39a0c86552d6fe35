"""Rows out: a result as the row suffice writes, the rows' typed models, and their Parquet tables.

- :mod:`~suffice.rows.shaping`: a result shaped into an output row; the error and engine-crash rows.
- :mod:`~suffice.rows.models`: the typed rows of a gate, from the registry (``suffice schema``, the OpenAPI).
- :mod:`~suffice.rows.tables`: the rows' typed Parquet schema, derived from each gate's verdict model.

``suffice.rows`` was the module that :mod:`~suffice.rows.shaping` is now: its names still resolve here, with a
:class:`DeprecationWarning` naming the new path, for one release.
"""

from suffice.records._moved import moved_names

__getattr__ = moved_names(__name__, __path__, "shaping")
