"""What every gate writes the same way, derived by the core: a gate declaring the JSON its model writes
(``output_model``) and computing a :class:`suffice.Verdict` from it (``from_output``) gets its constraint, its
parse, its route, its decision values, its probability and what fitting cut; the decision wrappers derive what
they read from the wrapped gate (scripted engine)."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel, Field

from suffice import Gate, Verdict, VerdictError, load_prompt
from suffice.gates import roles
from suffice.gates.decision_mode import FROM_INNER, AutoGate, DecisionGate
from suffice.grammars import ChunkLabel, model_rx
from suffice.judge import Judge
from suffice.records.item import Item
from suffice.serving.base import Generation, GenerationRequest
from tests.fakes import ScriptedEngine


class Picked(BaseModel):
    chunk: ChunkLabel | None
    decision: Literal["YES", "NO"]


class PickedVerdict(Verdict):
    chunk_id: int | str | None
    share: float


class PickGate(Gate):
    """The core alone, derived: options, template, the model's output and the verdict computed from it."""

    name = "pick"
    output_model, verdict_model = Picked, PickedVerdict
    decision_key, positive_value = "decision", '"YES"'

    def __init__(self, template_dir: Path, needs_response: bool = False) -> None:
        self.template = load_prompt(template_dir, "pick", "v1")
        self.needs_response = needs_response

    def from_output(self, output: Picked, item: Item, chunk_ids: Sequence[Any]) -> PickedVerdict:
        chosen = None if output.chunk is None else chunk_ids[output.chunk]
        return PickedVerdict(chunk_id=chosen, share=0.5, passes=chosen is not None)

    def shortcut(self, item: Item) -> PickedVerdict | None:
        return None if item.has_evidence else PickedVerdict(chunk_id=None, share=0.0, passes=False)


@pytest.fixture
def pick(tmp_path: Path) -> PickGate:
    (tmp_path / "v1").mkdir()
    (tmp_path / "v1" / "system.j2").write_text("Pick the chunk that answers the question.", encoding="utf-8")
    (tmp_path / "v1" / "user.j2").write_text("{{ question }}", encoding="utf-8")
    return PickGate(tmp_path)


RECORD = {"id": "r1", "question": "Who?", "chunks": [{"id": "k0", "text": "Tea."}, {"id": "k1", "text": "Ada."}]}


def said(text: str) -> Any:
    return lambda request: text


def test_its_constraint_is_its_output_models_json_naming_only_the_chunks_shown(pick: PickGate):
    [result] = Judge(ScriptedEngine(said('{"chunk":1,"decision":"YES"}')), pick).judge_batch([RECORD])
    constraint = pick.constraint_for([])  # no chunk shown: only null names one
    assert (result.verdict.chunk_id, constraint.key) == ("k1", "pick/0")
    assert constraint.matches('{"chunk":null,"decision":"NO"}')
    assert not constraint.matches('{"chunk":0,"decision":"NO"}')


def test_a_label_outside_the_chunks_shown_is_a_verdict_error(pick: PickGate):
    [result] = Judge(ScriptedEngine(said('{"chunk":2,"decision":"YES"}')), pick).judge_batch([RECORD])
    assert result.error is not None and result.error.type == VerdictError.__name__


def test_the_core_fills_the_prompt_version_and_what_fitting_cut(pick: PickGate):
    [result] = Judge(ScriptedEngine(said('{"chunk":0,"decision":"YES"}')), pick).judge_batch([RECORD])
    assert result.verdict.prompt_version == "pick/v1"
    assert (result.verdict.truncated_chunk_ids, result.verdict.model_called) == ([], True)


def test_a_shortcut_verdict_is_marked_as_decided_without_the_model(pick: PickGate):
    verdict = roles.shortcut(pick, roles.parse_item(pick, {"id": "r", "question": "Who?", "chunks": []}))
    assert isinstance(verdict, PickedVerdict)
    assert (verdict.prompt_version, verdict.model_called) == ("pick/v1", False)


def test_by_default_it_routes_by_passes_with_its_numbers_as_scores(pick: PickGate, tmp_path: Path):
    yes = PickedVerdict(chunk_id="k0", share=0.5, passes=True)
    no = yes.model_copy(update={"passes": False})
    assert (pick.route(yes).route, pick.route(yes).scores) == ("deliver", {"probability": None, "share": 0.5})
    assert pick.route(no).route == "retrieve_more"  # judging evidence: ask for more
    assert PickGate(tmp_path, needs_response=True).route(no).route == "abstain"  # checking a response
    assert roles.calibration_scores(pick, no.model_dump()) == {"probability": None, "share": 0.5, "decision": 0.0}


def test_its_decision_values_come_from_the_output_models_literal(pick: PickGate):
    assert roles.decision_of(pick) == roles.Decision("decision", ('"YES"', '"NO"'), '"YES"')
    assert DecisionGate(pick).decision_json_values == ('"YES"', '"NO"')


def test_its_probability_is_the_positive_values_from_the_token_logprobs(pick: PickGate):
    text = '{"chunk":1,"decision":"YES"}'

    def script(request: GenerationRequest) -> Generation:
        tokens = ('{"chunk":1,"decision":', '"YES"', "}")
        top = ({}, {'"YES"': math.log(0.8), '"NO"': math.log(0.2)}, {})
        return Generation(text, "stop", 10, 3, tokens=tokens, top_logprobs=top)

    [result] = Judge(ScriptedEngine(script), pick).judge_batch([RECORD])
    assert result.verdict.probability == pytest.approx(0.8)


def test_decision_only_mode_needs_nothing_more(pick: PickGate):
    [result] = Judge(ScriptedEngine(said('{"decision":"NO"}')), DecisionGate(pick)).judge_batch([RECORD])
    assert (result.verdict.decision, result.verdict.positive) == ('"NO"', False)


def test_a_gate_with_neither_output_model_nor_its_own_parse_is_told_which(pick: PickGate):
    class Bare(Gate):
        name = "bare"

    with pytest.raises(TypeError, match="output_model"):
        Bare().constraint_for([])


@pytest.mark.parametrize(
    ("annotation", "field"),
    [(list[int], "Field(max_length=...)"), (str, "max_length"), (int, "ge and le"), (float, "probability")],
)
def test_an_unbounded_output_field_is_refused_naming_it(annotation: Any, field: str):
    model = type("Out", (BaseModel,), {"__annotations__": {"x": annotation}})
    with pytest.raises(TypeError, match=re.escape("Out.x")):
        model_rx(model, 1)


def test_bounded_fields_take_their_json_forms():
    class Inner(BaseModel):
        ok: bool

    class Out(BaseModel):
        note: str = Field(max_length=3)
        count: int = Field(ge=1, le=3)
        p: float = Field(ge=0, le=1)
        inner: Inner
        labels: list[ChunkLabel] = Field(min_length=1, max_length=2)

    rx = re.compile(model_rx(Out, 2).pattern)
    assert rx.fullmatch('{"note":"abc","count":3,"p":0.25,"inner":{"ok":true},"labels":[1,0]}')
    assert not rx.fullmatch('{"note":"abcd","count":3,"p":0.25,"inner":{"ok":true},"labels":[1,0]}')
    assert not rx.fullmatch('{"note":"a","count":4,"p":0.25,"inner":{"ok":true},"labels":[1]}')
    assert not rx.fullmatch('{"note":"a","count":1,"p":0.25,"inner":{"ok":true},"labels":[]}')
    with pytest.raises(TypeError, match="no chunk is shown"):
        model_rx(Out, 0)


def test_the_wrappers_read_every_declaration_of_the_core_and_the_token_from_the_inner_gate(pick: PickGate):
    core = [n for n, hint in Gate.__annotations__.items() if not str(hint).startswith("ClassVar")]
    assert set(FROM_INNER) == {*core, *roles.TOKEN_NAMES}
    token, auto = roles.decision_of(pick), AutoGate(pick)
    assert token is not None
    inner = [*(getattr(pick, n) for n in core), token.key, token.values, token.positive]
    assert [getattr(auto, n) for n in FROM_INNER] == inner
