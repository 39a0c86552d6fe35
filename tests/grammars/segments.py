"""A shared check: an output splits into its constraint's segments, fine and coarse."""

import re

from suffice.grammars.constraint import EOS_TOKENS, Constraint, Segment


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


def decode(constraint: Constraint, outputs: list[str]) -> tuple[str, int]:
    """Decode ``outputs``, one per segment, as the engines do (a prefix prefilled, a speculative segment's text
    settled, the next segment from the continuation) with one byte a token: the text, and the completion tokens
    (each output's bytes and one end-of-sequence token)."""
    text, tokens = "", 0
    segment: Segment | None = constraint.first_segment()
    for out in outputs:
        assert segment is not None, f"more outputs than segments: {out!r}"
        assert re.fullmatch(segment.pattern, out), (segment.key, out)
        text += segment.prefix
        start = len(text)
        text += out
        tokens += len(out.encode("utf-8")) + EOS_TOKENS
        if segment.speculative:
            text = constraint.settled(text, start)
        segment = constraint.next_segment(text)
    assert segment is None, f"the output is not complete: {segment.key} is next"
    return text, tokens


def decoded_pieces(constraint: Constraint, text: str) -> list[str]:
    """What each segment decodes of a complete ``text`` (its prefix left out), on the path without a cut."""
    return [piece[len(segment.prefix) :] for segment, piece in constraint.segments_of(text)]
