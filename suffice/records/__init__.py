"""Records in: what an input record is, and how a file's bytes become records.

- :mod:`~suffice.records.item`: a record as an :class:`Item` of :class:`Chunk`\\ s, every bad field named, the caps.
- :mod:`~suffice.records.fields`: other schemas' field names (RAGAS too) mapped to a record's.
- :mod:`~suffice.records.lines`: any bytes read as records, one per line; a row written back losslessly.
- :mod:`~suffice.records.compressed`: gzip, bzip2 and xz inputs told by their first bytes.
"""
