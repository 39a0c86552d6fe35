"""The response with inline citations: byte for byte the response, with markers inserted right after segments.

A marker goes at a segment's end, before the whitespace that follows it: ``[CITATION:source_id]`` after each
segment that names sources (one marker per source, ids written by
:func:`~suffice.gates.recovery.grammar.cite_source`); where a partial answer is delivered, the unsupported marker
after each segment that is not fully supported, so no application can show it as supported by accident.

The response's own ``[CITATION:...]`` text is left out: only a citation the model named for a segment, among the
sources shown, is delivered, so a generator's unchecked (or damaged) marker never passes for a checked one.  Nothing
else changes: removing every marker gives the response back exactly, less its own markers (:func:`strip_markers`).
"""

from __future__ import annotations

from collections.abc import Sequence

from suffice.exceptions import ConfigError
from suffice.gates.recovery.grammar import CITATION, JudgedSegment, cite_source

#: The default unsupported marker (the ``unsupported_marker`` option).
UNSUPPORTED_MARKER = "[UNSUPPORTED]"
MARKER_CHARS = 64


def check_marker(marker: str) -> str:
    """``marker`` if it can mark a segment: non-empty, one line, at most :data:`MARKER_CHARS` characters, and
    nothing a citation could be read from."""
    if not isinstance(marker, str) or not marker.strip() or len(marker) > MARKER_CHARS:
        raise ConfigError("unsupported_marker", marker, f"must be 1-{MARKER_CHARS} characters of text")
    if "\n" in marker or "\r" in marker or "[CITATION:" in marker:
        raise ConfigError("unsupported_marker", marker, "must be one line and hold no [CITATION: marker")
    return marker


def cite(response: str, segments: Sequence[JudgedSegment], unsupported_marker: str | None = None) -> str:
    """``response`` with each citing segment's ``[CITATION:...]`` markers, and (``unsupported_marker`` given) that
    marker after each claim not fully supported (``partial`` after its citations, ``unsupported``)."""
    out: list[str] = []
    at = 0
    for seg in sorted(segments, key=lambda s: s.start):
        marks = "".join(f"[CITATION:{cite_source(source)}]" for source in seg.sources)
        if unsupported_marker is not None and seg.label in ("partial", "unsupported"):
            marks += unsupported_marker
        if marks:
            out.append(CITATION.sub("", response[at : seg.end]))
            out.append(marks)
            at = seg.end
    out.append(CITATION.sub("", response[at:]))
    return "".join(out)


def strip_markers(text: str, unsupported_marker: str | None = None) -> str:
    """``text`` without its citation markers (and ``unsupported_marker``): what :func:`cite` was given."""
    text = CITATION.sub("", text)
    return text.replace(unsupported_marker, "") if unsupported_marker else text
