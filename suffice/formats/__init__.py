"""Formats as plug-ins, found as gates are (:class:`suffice.gates.registry.Registry`):

- ``verdicts/``: the shape a row's verdict is written in (``--format``, ``?format=``): one module a format;
- ``files/``: the files ``suffice judge`` reads and writes (``--input-format``, ``--output-format``, by extension).

A format from another package is one entry point (``suffice.verdict_formats``, ``suffice.file_formats``).
"""
