import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from suffice.grammars import regex as R


def test_escape_only_metacharacters():
    assert R.escape('{"a":[1]}') == '\\{"a":\\[1\\]\\}'
    assert R.escape("a b,c") == "a b,c"


def test_json_string_exact_pattern_and_bound():
    rx = R.json_string(1, 3)
    assert rx.pattern == f'"{R.STRING_FIRST_CHAR_CLASS}({R.STRING_CHAR_CLASS}){{0,2}}"'
    assert rx.max_bytes == 2 + 3 * R.STRING_CHAR_MAX_BYTES


def test_json_string_rejects_escapes_controls_and_overflow():
    compiled = re.compile(R.json_string(1, 5).pattern)
    assert compiled.fullmatch('"Zürich"') is None  # 6 characters
    assert compiled.fullmatch('"Zür"')
    assert compiled.fullmatch('"東京"')
    assert compiled.fullmatch('"a\\"b"') is None
    assert compiled.fullmatch('"a\nb"') is None
    assert compiled.fullmatch('""') is None
    assert compiled.fullmatch('" ab"') is None


def test_unit_interval():
    compiled = re.compile(R.UNIT_INTERVAL.pattern)
    for good in ["0", "0.5", "0.05", "1", "1.0", "1.00", "0.99"]:
        assert compiled.fullmatch(good), good
    for bad in ["1.5", "0.123", "-0.1", "01", "2", "1.01", "."]:
        assert compiled.fullmatch(bad) is None, bad


def test_repeat_and_list_bounds():
    assert R.repeat(R.lit("ab"), 0, 3) == R.Rx("(ab){0,3}", 6)
    lst = R.json_list(R.lit("x"), 1, 3)
    compiled = re.compile(lst.pattern)
    assert compiled.fullmatch("[x]") and compiled.fullmatch("[x,x,x]")
    assert compiled.fullmatch("[]") is None and compiled.fullmatch("[x,x,x,x]") is None
    assert lst.max_bytes == len("[x,x,x]")
    with pytest.raises(ValueError, match="lo=2, hi=1"):
        R.repeat(R.lit("a"), 2, 1)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_generated_strings_never_exceed_max_bytes(data):
    rx = R.json_list(R.json_string(1, 6), 0, 3)
    text = data.draw(st.from_regex(rx.pattern, fullmatch=True))
    assert len(text.encode("utf-8")) <= rx.max_bytes
