"""Every gate's constraint, compiled by each of vLLM's structured-output backends with the embedded model's real
tokenizer, accepts the outputs the constraint allows and refuses the ones it does not: no model, no engine.

What a backend enforces is the grammar it compiles: these tests replace the three-backend matrix that judged the
same records again on an engine per backend (tests/serving/test_engines.py and the gates' engine tests now run on
the default backend only; ``test_one_small_generation_per_backend`` there keeps one real generation per backend).
The grammars are built by vLLM's own backend classes (``XgrammarBackend``, ``GuidanceBackend``,
``OutlinesBackend``), the code an engine runs, and fed the way an engine feeds them: each segment's decoded text
(its prefix is prefilled, not decoded) as the tokenizer's tokens, then end-of-sequence.

The oracle is Python's ``re`` on the segment's own pattern: a backend must accept exactly what it matches, on
strings the constraint allows and on mutations of them (a character deleted, doubled or replaced, a piece cut
short or run past its end).
"""

from __future__ import annotations

import os
import random
import re
import types
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from suffice.gates import DecisionGate
from suffice.gates.adequacy.grammar import adequacy_constraint
from suffice.gates.recovery import RecoveryGate
from suffice.gates.sufficiency import SufficiencyGate
from suffice.grammars.constraint import Constraint, Segment
from suffice.records.item import Chunk
from tests.grammars.drawing import narrowed
from tests.grammars.segments import cut_back_constraint

# Compiling the gates' large segments takes seconds each (outlines-core: up to ~20 s and 2 GB under load), but no
# engine: they run in the fast pass, on its two workers, where a test of one core's work belongs.
pytestmark = [
    # vLLM's matcher passes xgrammar an argument it deprecated; once per compiled grammar.
    pytest.mark.filterwarnings("ignore:max_rollback_tokens is deprecated:DeprecationWarning"),
]

BACKENDS = ("xgrammar", "guidance", "outlines")
#: Strings drawn per constraint; each is split into its segments and every segment's piece mutated.
EXAMPLES = 6
#: Characters a mutation inserts or replaces with: JSON's structure, escapes, digits, a letter, whitespace, a
#: letter of two and one of three UTF-8 bytes, and the line separator the gates treat specially.
MUTANTS = ['"', "\\", ",", "]", "}", "0", "9", "a", " ", "\n", "\u00e9", "\u4e2d", "\u2028"]


def _shown(n: int) -> list[Chunk]:
    return [Chunk(id=str(i), text=f"chunk {i}", source=f"s{i}") for i in range(n)]


def _constraints() -> dict[str, Constraint]:
    """Each gate's constraint as an engine would compile it, full and decision-only."""
    sufficiency, recovery = SufficiencyGate(), RecoveryGate()
    return {
        "sufficiency": sufficiency.constraint_for(_shown(3)),
        "sufficiency-decision": DecisionGate(sufficiency).constraint_for(_shown(3)),
        "recovery": recovery.constraint_for(_shown(2)),
        "recovery-decision": DecisionGate(recovery).constraint_for(_shown(2)),
        "adequacy": adequacy_constraint(criteria=4),
        "adequacy-own-dimensions": adequacy_constraint(("accuracy", "tone"), criteria=1),
    }


CONSTRAINTS = _constraints()


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    """The tokenizer an engine on the embedded model loads (``llm_kwargs``'s ``tokenizer``: the model folder)."""
    from transformers import AutoTokenizer

    from suffice.serving.weights import embedded_model

    return AutoTokenizer.from_pretrained(str(embedded_model().path))


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request: pytest.FixtureRequest, tokenizer: Any) -> Iterator[Any]:
    """vLLM's backend object for ``request.param``, built as the engine builds it (its settings as ours leave them)."""
    # As suffice.serving.machine sets it for an engine: outlines-core compiles a gate's head in more than vLLM's 5 s.
    os.environ.setdefault("VLLM_REGEX_COMPILATION_TIMEOUT_S", "120")
    from vllm.v1.structured_output.backend_guidance import GuidanceBackend
    from vllm.v1.structured_output.backend_outlines import OutlinesBackend
    from vllm.v1.structured_output.backend_xgrammar import XgrammarBackend

    classes = {"xgrammar": XgrammarBackend, "guidance": GuidanceBackend, "outlines": OutlinesBackend}
    vllm_config = types.SimpleNamespace(
        structured_outputs_config=types.SimpleNamespace(
            disable_any_whitespace=False, disable_additional_properties=False
        ),
        model_config=types.SimpleNamespace(hf_config=types.SimpleNamespace(model_type="llama")),
        speculative_config=None,
    )
    built = classes[request.param](vllm_config, tokenizer, len(tokenizer))
    built.name = request.param
    yield built
    built.destroy()


def _accepts_tokens(backend: Any, tokenizer: Any, pattern: str, tokens: list[int]) -> bool:
    from vllm.v1.structured_output.backend_types import StructuredOutputOptions

    grammar = backend.compile_grammar(StructuredOutputOptions.REGEX, pattern)  # the backend caches compiled forms
    if tokens and not grammar.accept_tokens("test", tokens):
        return False
    return bool(grammar.accept_tokens("test", [tokenizer.eos_token_id])) and grammar.is_terminated()


def byte_tokens(tokenizer: Any, text: str) -> list[int]:
    """``text`` as one byte-level token a byte (the embedded model's tokenizer is GPT-2's byte-level BPE)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    table = bytes_to_unicode()
    return [tokenizer.convert_tokens_to_ids(table[b]) for b in text.encode("utf-8")]


def accepts(backend: Any, tokenizer: Any, pattern: str, text: str) -> bool:
    """Whether ``backend``'s grammar for ``pattern`` lets an engine decode ``text`` and then end the sequence.

    As the tokenizer's tokens; for outlines, also as one token a byte: vLLM 0.32's outlines vocabulary reads a
    token holding an ASCII byte then part of a UTF-8 character (``"Ġâ"``: a space and 0xE2) as a space and U+FFFD,
    so outlines refuses that tokenization of text its pattern allows, and leaves the model the byte tokens."""
    if _accepts_tokens(backend, tokenizer, pattern, tokenizer.encode(text, add_special_tokens=False)):
        return True
    return backend.name == "outlines" and _accepts_tokens(backend, tokenizer, pattern, byte_tokens(tokenizer, text))


def mutations(piece: str, rng: random.Random) -> list[str]:
    """Near misses of ``piece``: cut short, run on, a character deleted, doubled or replaced, one inserted."""
    out = [piece[:-1], piece + piece[-1:], piece + "x", piece + '"']
    if piece:
        for _ in range(8):
            at = rng.randrange(len(piece))
            char = rng.choice(MUTANTS)
            out += [piece[:at] + piece[at + 1 :], piece[:at] + piece[at] + piece[at:]]  # deleted, doubled
            out += [piece[:at] + char + piece[at + 1 :], piece[:at] + char + piece[at:]]  # replaced, inserted
    return list(dict.fromkeys(m for m in out if m != piece))


def _pieces(constraint: Constraint, text: str) -> list[tuple[Segment, str]]:
    """What each segment decodes of ``text`` (its prefix left out), as the engine decodes it."""
    return [(segment, piece[len(segment.prefix) :]) for segment, piece in constraint.segments_of(text)]


def check_backend_agrees(backend: Any, tokenizer: Any, constraint: Constraint, text: str, seed: int) -> int:
    """Every segment's piece of ``text`` is accepted, and each mutation exactly when ``re`` matches it.  Returns
    how many mutations were refused (a test that refused none would prove nothing)."""
    assert constraint.matches(text), text
    rng = random.Random(seed)
    refused = 0
    for segment, piece in _pieces(constraint, text):
        assert accepts(backend, tokenizer, segment.pattern, piece), (backend.name, segment.key, piece)
        for mutant in mutations(piece, rng):
            expected = re.fullmatch(segment.pattern, mutant) is not None
            got = accepts(backend, tokenizer, segment.pattern, mutant)
            assert got == expected, (backend.name, segment.key, mutant, f"re: {expected}")
            refused += not got
    return refused


@pytest.mark.parametrize("name", sorted(CONSTRAINTS))
def test_each_backend_accepts_what_the_constraint_allows_and_refuses_near_misses(backend, tokenizer, name):
    constraint = CONSTRAINTS[name]
    drawn: list[str] = []

    @settings(
        max_examples=EXAMPLES * 4,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.data())
    def draw(data: st.DataObject) -> None:
        text = data.draw(st.from_regex(narrowed(constraint.pattern), fullmatch=True))
        if constraint.matches(text) and text not in drawn and len(drawn) < EXAMPLES:
            drawn.append(text)

    draw()
    assert len(drawn) >= 2, f"only {drawn} of {name} drawn"  # a decision allows only its two or three values
    refused = sum(check_backend_agrees(backend, tokenizer, constraint, text, seed) for seed, text in enumerate(drawn))
    assert refused > 0


def test_each_backend_forces_the_cut_back_segments_only_output(backend, tokenizer):
    """The speculative segment of tests/serving/test_engines.py's cut-back test leaves the model one output."""
    constraint = cut_back_constraint()
    segment = constraint.first_segment()
    assert accepts(backend, tokenizer, segment.pattern, "2,1]")
    for near in ("2,1", "2]", "2,3]", "2,1]]", "1,2]"):
        assert not accepts(backend, tokenizer, segment.pattern, near), (backend.name, near)
