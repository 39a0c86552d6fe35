"""A shared check: an output splits into its constraint's segments, fine and coarse."""

import re

from suffice.grammars.constraint import Constraint


def assert_splits_into_segments(constraint: Constraint, text: str) -> None:
    assert len(text.encode("utf-8")) <= constraint.max_bytes
    for coarse in (False, True):
        pieces = constraint.segments_of(text, coarse=coarse)
        assert "".join(piece for _, piece in pieces) == text
        for segment, piece in pieces:
            assert piece.startswith(segment.prefix)
            decoded = piece[len(segment.prefix) :]
            assert re.fullmatch(segment.pattern, decoded)
            assert len(decoded.encode("utf-8")) <= segment.max_bytes
