import jinja2
import pytest

from suffice.exceptions import ConfigError
from suffice.grammars.sufficiency import SufficiencyBounds
from suffice.prompts.templates import load_prompt


def test_version_and_strict_undefined():
    t = load_prompt("sufficiency")
    assert t.name == "sufficiency/v4"
    with pytest.raises(jinja2.UndefinedError):
        t.render({"bounds": SufficiencyBounds}, {"question": "q"})  # chunks missing


def test_chunks_are_labelled_and_instructions_come_first():
    t = load_prompt("sufficiency")
    system, user = t.render(
        {"bounds": SufficiencyBounds},
        {
            "question": "Who?",
            "chunks": [{"label": 0, "text": "Ada", "source": "wiki"}, {"label": 1, "text": "{x}", "source": None}],
        },
    )
    assert system["role"] == "system"
    assert user["role"] == "user"
    assert "Who?" not in system["content"]  # per-item text stays out of the shared prefix
    lines = user["content"].splitlines()
    # One line a chunk, its label first: a few tokens a chunk (the label used to cost 7 with
    # SmolLM2's tokenizer as "ID: k" on a line of its own, 4 now), so a request split into
    # many chunks does not pay much more prompt than the same text in few.
    assert lines[-2:] == ["0: (source: wiki) Ada", "1: {x}"]
    other = t.render({"bounds": SufficiencyBounds}, {"question": "Other?", "chunks": []})
    assert other[0] == system  # identical instructions for every item: a shared prefix


def test_unknown_version_is_a_config_error():
    with pytest.raises(ConfigError) as info:
        load_prompt("sufficiency", "v99")
    assert info.value.parameter == "prompt_version"
