"""The response cut into sentences and claims (suffice.gates.recovery.segments), on hard text."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from suffice.gates.recovery.segments import MAX_SEGMENT_CHARS, Segment, segment

DOCS = Path(__file__).resolve().parents[2] / "docs" / "gates.md"


def check(response: str, segments: list[Segment], max_chars: int = MAX_SEGMENT_CHARS) -> None:
    """What holds for every response: in order, no overlap, offsets that point at the text, every visible
    character in one segment unless its line is markup only."""
    covered = [False] * len(response)
    last_end = 0
    for i, s in enumerate(segments):
        assert s.index == i
        assert last_end <= s.start < s.end <= len(response)
        assert response[s.start : s.end] == s.text == s.text.strip()
        assert len(s.text) <= max_chars
        if s.kind in ("heading", "table_row", "code_line"):
            assert len(s.text.splitlines()) == 1, s
        covered[s.start : s.end] = [True] * len(s.text)
        last_end = s.end
    lines = response.splitlines(keepends=True)
    starts = [sum(len(line) for line in lines[:i]) for i in range(len(lines))]
    for start, line in zip(starts, lines, strict=True):
        markup = MARKUP.fullmatch(line.strip())
        for k, char in enumerate(line):
            assert covered[start + k] or char.isspace() or markup, (response, start + k, line)


# What a line of markup only may look like (a superset of what the module skips): a code fence, a table's
# delimiter row, a thematic break or setext underline.
MARKUP = re.compile(r"(?:`{3,}[^`]*|~~~.*|[\s|:-]*-[\s|:-]*|[\s*_=-]+)")


def cut(response: str, **options: int) -> list[tuple[str, str]]:
    segments = segment(response, **options)
    check(response, segments, **options)
    return [(s.kind, s.text) for s in segments]


def sentences(*texts: str) -> list[tuple[str, str]]:
    return [("sentence", t) for t in texts]


def test_abbreviations_titles_and_initials_do_not_end_a_sentence() -> None:
    response = (
        "Dr. Smith and Mr. Jones met Prof. Lee at St. Mary's, i.e. the hospital. "
        "Mrs. Brown and Ms. Green came too, e.g. with J. K. Rowling. It was cats vs. dogs. "
        "The U.S. Army helped. Smith et al. (2020) found it. Roe v. Wade, cf. Fig. 2."
    )
    assert cut(response) == sentences(
        "Dr. Smith and Mr. Jones met Prof. Lee at St. Mary's, i.e. the hospital.",
        "Mrs. Brown and Ms. Green came too, e.g. with J. K. Rowling.",
        "It was cats vs. dogs.",
        "The U.S. Army helped.",
        "Smith et al. (2020) found it.",
        "Roe v. Wade, cf. Fig. 2.",
    )


def test_abbreviations_that_may_end_a_sentence_end_one_before_a_capital_only() -> None:
    response = (
        "See Fig. 3 and No. 5 on p. 12. The answer is no. Apples, pears, etc. are fruit. "
        "Apples, pears, etc. The rest are not. Made by Acme Inc. (founded 1990). It is approx. 3 m long."
    )
    assert cut(response) == sentences(
        "See Fig. 3 and No. 5 on p. 12.",
        "The answer is no.",
        "Apples, pears, etc. are fruit.",
        "Apples, pears, etc.",
        "The rest are not.",
        "Made by Acme Inc. (founded 1990).",
        "It is approx. 3 m long.",
    )


def test_a_lowercase_word_after_the_mark_continues_the_sentence() -> None:
    assert cut("It costs ca. three euros. Really? yes, really! Wait... what? Wait... What?") == sentences(
        "It costs ca. three euros.", "Really? yes, really!", "Wait... what?", "Wait...", "What?"
    )


def test_decimals_versions_urls_e_mails_and_file_names_stay_whole() -> None:
    response = (
        "Pi is about 3.14159. The dose is 0.5 mg, not 1.5. Version v1.2.3 fixed it. "
        "See https://example.com/docs/v2.1/index.html?q=a.b#s.1 for details. Write to jane.doe@example.org. "
        "Run setup.py. It costs $4.99."
    )
    assert cut(response) == sentences(
        "Pi is about 3.14159.",
        "The dose is 0.5 mg, not 1.5.",
        "Version v1.2.3 fixed it.",
        "See https://example.com/docs/v2.1/index.html?q=a.b#s.1 for details.",
        "Write to jane.doe@example.org.",
        "Run setup.py.",
        "It costs $4.99.",
    )


def test_quotes_and_brackets_closed_in_the_paragraph_hold_their_sentences() -> None:
    response = (
        'She said "It works. Really." and left. He said "Stop." Then he ran. '
        "“Is it? Yes.” he asked. (See the note. It helps.) The end. [One. Two.] Three."
    )
    assert cut(response) == sentences(
        'She said "It works. Really." and left.',
        'He said "Stop."',
        "Then he ran.",
        "“Is it? Yes.” he asked.",
        "(See the note. It helps.)",
        "The end.",
        "[One. Two.]",
        "Three.",
    )


def test_a_quote_or_bracket_never_closed_protects_nothing() -> None:
    assert cut('He is 6" tall. She is not. It said "maybe. Then nothing. A (lone bracket. Then more.') == sentences(
        'He is 6" tall.', "She is not.", 'It said "maybe.', "Then nothing.", "A (lone bracket.", "Then more."
    )


def test_closing_emphasis_code_and_adjacent_citations_stay_with_their_sentence() -> None:
    response = "**Note.** Read it. It is *vital.* Call `f()`. `a. B` is code. Paris is in France.[1] It is big.[2][3]"
    assert cut(response) == sentences(
        "**Note.**",
        "Read it.",
        "It is *vital.*",
        "Call `f()`.",
        "`a. B` is code.",
        "Paris is in France.[1]",
        "It is big.[2][3]",
    )


def test_a_sentence_runs_over_the_lines_of_its_paragraph() -> None:
    response = "The drug was approved\nin 2019. It is\ntaken daily.\n\nA new paragraph"
    assert cut(response) == sentences("The drug was approved\nin 2019.", "It is\ntaken daily.", "A new paragraph")


def test_a_list_item_is_one_segment_with_its_continuation_lines() -> None:
    response = (
        "Options:\n"
        "- The first. It has two sentences.\n"
        "- The second\n  continues here.\n"
        "  - nested item\n"
        "* star item\n"
        "+ plus item\n"
        "• bullet item\n"
        "1. numbered one\n"
        "2) numbered two\n"
        "-\n"
        "\n"
        "After the list. Done."
    )
    assert cut(response) == [
        ("sentence", "Options:"),
        ("list_item", "- The first. It has two sentences."),
        ("list_item", "- The second\n  continues here."),
        ("list_item", "- nested item"),
        ("list_item", "* star item"),
        ("list_item", "+ plus item"),
        ("list_item", "• bullet item"),
        ("list_item", "1. numbered one"),
        ("list_item", "2) numbered two"),
        ("list_item", "-"),
        ("sentence", "After the list."),
        ("sentence", "Done."),
    ]


def test_an_unindented_line_after_an_item_that_ended_its_sentence_starts_a_paragraph() -> None:
    response = (
        "Facts:\n- Aspirin lowers fever.[1]\nIn summary, it works. It is cheap.\n- Wrapped item that goes\non here."
    )
    assert cut(response) == [
        ("sentence", "Facts:"),
        ("list_item", "- Aspirin lowers fever.[1]"),
        ("sentence", "In summary, it works."),
        ("sentence", "It is cheap."),
        ("list_item", "- Wrapped item that goes\non here."),
    ]


def test_emphasis_and_dates_at_a_line_start_are_not_list_items() -> None:
    assert cut("**Bold** start. It is fine.\n*emphasis* here.") == sentences(
        "**Bold** start.", "It is fine.", "*emphasis* here."
    )


def test_markdown_headings_tables_code_quotes_and_breaks() -> None:
    response = (
        "# Answer\n"
        "## Dosage. Daily\n"
        "#hashtag is text.\n"
        "\n"
        "| Drug | Dose |\n"
        "|:-----|-----:|\n"
        "| A. B | 1.5 mg |\n"
        "\n"
        "Drug | Dose\n"
        "--- | ---\n"
        "C | 2 mg\n"
        "\n"
        "```python\n"
        "# not a heading\n"
        "  - not an item. Two.\n"
        "\n"
        "x = 1\n"
        "```\n"
        "> A quote. Two sentences.\n"
        "> Still the quote.\n"
        "\n"
        "* * *\n"
        "Setext title\n"
        "============\n"
        "The end."
    )
    assert cut(response) == [
        ("heading", "# Answer"),
        ("heading", "## Dosage. Daily"),
        ("sentence", "#hashtag is text."),
        ("table_row", "| Drug | Dose |"),
        ("table_row", "| A. B | 1.5 mg |"),
        ("table_row", "Drug | Dose"),
        ("table_row", "C | 2 mg"),
        ("code_line", "# not a heading"),
        ("code_line", "- not an item. Two."),
        ("code_line", "x = 1"),
        ("sentence", "> A quote."),
        ("sentence", "Two sentences."),
        ("sentence", "> Still the quote."),
        ("heading", "Setext title"),
        ("sentence", "The end."),
    ]


def test_an_unclosed_fence_runs_to_the_end_and_a_longer_fence_closes_only_on_its_length() -> None:
    response = "Before.\n````\n```\ncode. More code.\n````\nAfter.\n~~~\nlast line"
    assert cut(response) == [
        ("sentence", "Before."),
        ("code_line", "```"),
        ("code_line", "code. More code."),
        ("sentence", "After."),
        ("code_line", "last line"),
    ]


def test_cjk_sentences_end_after_their_marks_without_spaces() -> None:
    assert cut("今天天气很好。我们去公园吧！你去吗？好") == sentences(
        "今天天气很好。", "我们去公园吧！", "你去吗？", "好"
    )
    assert cut("これはペンです。それは本です｡") == sentences("これはペンです。", "それは本です｡")


def test_a_cjk_quote_ends_its_sentence_only_where_the_text_after_it_does_not_go_on() -> None:
    response = "他说：「我很好。你呢？」然后走了。「再见。」「明天见！」 English follows. 中文。"
    assert cut(response) == sentences(
        "他说：「我很好。你呢？」然后走了。", "「再见。」", "「明天见！」", "English follows.", "中文。"
    )


def test_a_response_with_no_terminator_is_one_segment() -> None:
    response = "the evidence shows that aspirin reduces fever in adults and children alike"
    assert cut(response) == sentences(response)


def test_nothing_visible_means_no_segment() -> None:
    for response in ("", " \n\t\u3000\xa0", "---\n\n```\n```\n|---|---|\n***"):
        assert segment(response) == []


def test_one_long_sentence_is_cut_under_the_limit_after_a_clause_or_at_whitespace() -> None:
    words = " ".join(f"word{i}" for i in range(400))  # 3,289 characters, no mark
    segments = segment(words)
    check(words, segments)
    assert len(segments) == 4
    assert all(len(s.text) <= MAX_SEGMENT_CHARS and s.kind == "sentence" for s in segments)
    assert " ".join(s.text for s in segments) == words
    assert cut("aaaa bb, cc dd eeee", max_chars=12) == sentences("aaaa bb,", "cc dd eeee")
    assert cut("aa, bbbbbb cc dd", max_chars=12) == sentences("aa, bbbbbb", "cc dd")


def test_a_long_run_without_whitespace_is_cut_at_exactly_the_limit() -> None:
    assert cut("x" * 25, max_chars=10) == sentences("x" * 10, "x" * 10, "x" * 5)
    assert cut("一二三四五，六七八九十一二", max_chars=8) == sentences("一二三四五，", "六七八九十一二")


def test_items_rows_and_code_lines_over_the_limit_keep_their_kind() -> None:
    response = "- one two three four\n| a | b | c | d |\n```\nalpha beta gamma\n```"
    assert cut(response, max_chars=10) == [
        ("list_item", "- one two"),
        ("list_item", "three four"),
        ("table_row", "| a | b |"),
        ("table_row", "c | d |"),
        ("code_line", "alpha beta"),
        ("code_line", "gamma"),
    ]


def test_every_line_break_a_model_reads_ends_a_line() -> None:
    assert cut("# Title\r\nOne. Two.\r\n\r\n- item\u2028- other\x0c") == [
        ("heading", "# Title"),
        ("sentence", "One."),
        ("sentence", "Two."),
        ("list_item", "- item"),
        ("list_item", "- other"),
    ]


def test_offsets_point_into_the_response_as_given() -> None:
    response = "  Héllo wörld. 🙂 Next one!  "
    assert [(s.start, s.end, s.text) for s in segment(response)] == [
        (2, 14, "Héllo wörld."),
        (15, 26, "🙂 Next one!"),
    ]


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "10"])
def test_max_chars_must_be_a_positive_whole_number(bad: object) -> None:
    with pytest.raises(ValueError, match="max_chars"):
        segment("text", max_chars=bad)  # type: ignore[arg-type]


def test_a_segment_is_frozen_and_refuses_offsets_that_do_not_fit_its_text() -> None:
    s = Segment(index=0, start=3, end=6, text="abc", kind="sentence")
    assert Segment.model_validate(s.model_dump()) == s
    with pytest.raises(ValidationError):
        s.start = 4
    for fields in (
        {"end": 7},
        {"text": " ab", "end": 6},
        {"text": "", "end": 3},
        {"start": -1, "end": 2},
        {"index": -1},
        {"kind": "paragraph"},
    ):
        with pytest.raises(ValidationError):
            Segment.model_validate({**s.model_dump(), **fields})


# Text made to hit the rules: marks, quotes, brackets, Markdown at line starts, CJK, abbreviations and breaks.
PIECES = st.sampled_from(
    [
        *'.!?…。！？"“”「」()[]`*_|-+#>~:,;1aAé中 \n\t\xa0\u2028',
        "\r\n",
        "```",
        "~~~",
        "---",
        "|---|",
        "1. ",
        "- ",
        "Dr.",
        "e.g.",
        "U.S.",
        "J.",
        "etc.",
        "No.",
        "3.14",
    ]
)
TEXTS = st.one_of(st.text(max_size=300), st.lists(PIECES, max_size=120).map("".join))


@settings(max_examples=400, deadline=None)
@given(response=TEXTS, max_chars=st.one_of(st.just(MAX_SEGMENT_CHARS), st.integers(1, 40)))
def test_any_text_is_cut_in_order_without_overlap_and_every_visible_character_counted(
    response: str, max_chars: int
) -> None:
    segments = segment(response, max_chars=max_chars)
    check(response, segments, max_chars)
    assert segment(response, max_chars=max_chars) == segments


def test_a_3000_word_response_is_cut() -> None:
    paragraph = (
        "Dr. Smith reported that the dose of 2.5 mg (i.e. half the usual) was safe. "
        'The trial, run in the U.S. and the U.K., enrolled 1,024 patients; "none died," she said. '
        "See https://example.org/trial?id=3.1 for details! Was it blinded? Yes.\n\n"
        "- A list item. With two sentences.\n| a | b |\n|---|---|\n| 1 | 2 |\n\n"
    )
    response = paragraph * (3000 // len(paragraph.split()) + 1)
    assert len(response.split()) >= 3000
    segments = segment(response)
    check(response, segments)
    assert len(segments) == 8 * (3000 // len(paragraph.split()) + 1)


def test_the_docs_state_the_longest_segment() -> None:
    text = " ".join(DOCS.read_text(encoding="utf-8").split())
    stated = re.findall(r"`MAX_SEGMENT_CHARS` \(([\d,]+) characters", text)
    assert stated == [f"{MAX_SEGMENT_CHARS:,}"]
