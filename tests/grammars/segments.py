"""A shared check: an output splits into its constraint's segments, fine and coarse."""

import re

from suffice.grammars.constraint import Constraint, Segment


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


def cut_back_constraint(listed_pattern: str = r"2,1\]") -> Constraint:
    """A speculative list in ``[`` ... ``]`` that settle cuts from ``[2,1]`` to ``[2``;
    an exact segment then continues with ``,3]``.  The default pattern leaves the model
    only ``2,1]``, so a real engine must take the cut."""
    listed = Segment(listed_pattern, max_bytes=8, key="test/listed", prefix="[", speculative=True)
    after_cut = Segment(r",3\]", max_bytes=3, key="test/after-cut")
    return Constraint(
        pattern=r"\[2,3\]",
        max_bytes=5,
        key="test/cut-back",
        head=listed,
        continuation=lambda text: after_cut if text == "[2" else None,
        settle=lambda text: "[2" if text == "[2,1]" else text,
    )
