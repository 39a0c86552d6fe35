"""Rows out: a result as the row suffice writes, the rows' typed models, and their Parquet tables.

- :mod:`~suffice.rows.shaping`: a result shaped into an output row; the error and engine-crash rows.
- :mod:`~suffice.rows.row_types`: the typed rows of a gate, from the registry (``suffice schema``, the OpenAPI).
- :mod:`~suffice.rows.tables`: the rows' typed Parquet schema, derived from each gate's verdict model.
"""
