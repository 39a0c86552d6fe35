import pytest

from suffice.exceptions import InputError
from suffice.records.item import InvalidRecord, RepeatedKeys, clean_text, parse_record, record_id


def rec(**kw):
    base = {"id": "q1", "question": "Who?", "chunks": [{"id": 0, "text": "Ada."}]}
    base.update(kw)
    return base


@pytest.mark.parametrize(
    ("record", "field"),
    [
        ({"question": "Who?", "chunks": []}, "id"),
        (rec(id=None), "id"),
        (rec(id=True), "id"),
        ({"id": "x", "chunks": []}, "question"),
        (rec(question="   "), "question"),
        (rec(chunks="not a list"), "chunks"),
        (rec(chunks=None), "chunks"),
        (rec(chunks=[{"id": 0, "text": "a"}, {"id": 0, "text": "b"}]), "chunks[1].id"),
        (rec(chunks=[{"id": 0, "text": 5}]), "chunks[0].text"),
        (rec(chunks=[{"id": [1], "text": "a"}]), "chunks[0].id"),
        (rec(chunks=[{"id": 0, "text": "a", "score": "high"}]), "chunks[0].score"),
        (rec(chunks=[{"id": 0, "text": "a", "score": float("nan")}]), "chunks[0].score"),
        (rec(chunks=["just text"]), "chunks[0]"),
        (["not", "an", "object"], "record"),
        (InvalidRecord(line=3, message="Expecting value"), "record"),
        (rec(question="\x00\x01 \x7f"), "question"),
        (rec(chunks=[{"id": 0, "text": "a", "score": 10**400}]), "chunks[0].score"),
        (rec(chunks=[{"id": 1, "text": "a"}, {"id": "1", "text": "b"}]), "chunks[1].id"),
        pytest.param(rec(id=10**5000), "id", id="huge-id"),
        pytest.param(rec(chunks=[{"id": 10**5000, "text": "a"}]), "chunks[0].id", id="huge-chunk-id"),
    ],
)
def test_bad_records_name_the_field(record, field):
    with pytest.raises(InputError) as info:
        parse_record(record)
    assert info.value.field == field
    assert str(info.value).startswith(field)


def test_response_required_only_when_asked():
    assert parse_record(rec()).response is None
    with pytest.raises(InputError) as info:
        parse_record(rec(), need_response=True)
    assert info.value.field == "response"
    assert parse_record(rec(response="Ada did."), need_response=True).response == "Ada did."


def test_control_characters_are_removed_and_other_text_kept():
    item = parse_record(rec(chunks=[{"id": "a", "text": 'x\x00y\x1b{"}\\ 東京\n', "source": "s", "score": 1}]))
    assert item.chunks[0].text == 'xy{"}\\ 東京\n'
    assert item.chunks[0].score == 1.0
    assert item.id == "q1"


def test_record_id_for_error_lines():
    assert record_id({"id": 7}) == "7"
    assert record_id({"id": 10**5000}) is None  # str() of it raised and took the batch down
    assert record_id({"question": "x"}) is None
    assert record_id(InvalidRecord(1, "bad")) is None


def test_a_lone_surrogate_in_text_becomes_the_replacement_character():
    assert clean_text("a\ud800b") == "a\ufffdb"


def test_a_response_of_control_characters_alone_is_not_a_response():
    with pytest.raises(InputError) as info:
        parse_record(rec(response="\x00\x07"), need_response=True)
    assert info.value.field == "response"


def test_a_score_too_large_for_a_float_is_shown_shortened():
    with pytest.raises(InputError) as info:
        parse_record(rec(chunks=[{"id": 0, "text": "a", "score": 10**400}]))
    assert len(str(info.value)) < 120


def test_an_unreadable_record_says_what_could_not_be_read():
    with pytest.raises(InputError) as info:
        reason = "cannot be read: OverflowError: date value out of range"
        parse_record(InvalidRecord(line=4, message=reason, what="row"))
    assert str(info.value) == "record: row 4 cannot be read: OverflowError: date value out of range"


def _repeated(pairs, key):
    marked = RepeatedKeys(pairs)
    marked.repeated = frozenset({key})
    return marked


def test_a_record_with_a_key_twice_is_an_error_naming_the_key():
    with pytest.raises(InputError) as info:
        parse_record(_repeated([("id", "b"), ("question", "Q?"), ("chunks", []), ("id", "c")], "id"))
    assert info.value.field == "id"


def test_a_chunk_with_a_key_twice_is_an_error_naming_the_chunks_key():
    chunk = _repeated([("id", 0), ("text", "a"), ("text", "b")], "text")
    with pytest.raises(InputError) as info:
        parse_record(rec(chunks=[{"id": 1, "text": "x"}, chunk]))
    assert info.value.field == "chunks[1].text"


def test_a_key_twice_that_suffice_does_not_read_is_ignored_like_the_key():
    record = _repeated([("id", "b"), ("question", "Q?"), ("chunks", []), ("meta", 1), ("meta", 2)], "meta")
    assert parse_record(record).id == "b"


def test_a_128_bit_integer_id_is_an_id():
    assert parse_record(rec(id=2**128 - 1)).id == str(2**128 - 1)
