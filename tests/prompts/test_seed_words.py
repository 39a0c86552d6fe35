"""The seeds' words that test_seed_wording's sentences do not reach: every numbered instruction of the recovery
seed under its own number, and the adequacy seed's inputs (the rubric's use case, risk level and criteria above
all) and output fields, each checked in the prompt its gate renders for a real record and a real rubric.

A template edit that drops or rewords one of them changes what the gate asks the model; these tests make that a
decision to take here, not an accident of an edit.
"""

from __future__ import annotations

import re

import pytest

from suffice.config import JudgeConfig
from suffice.gates.adequacy.store import RubricStore
from suffice.judge import Judge
from suffice.serving.base import GenerationRequest
from tests.fakes import ScriptedEngine
from tests.prompts.test_seed_wording import RECORD, SEEDS, flat

EIR = "evidence-insufficiency-recovery.md"
CAE = "context-adequacy-evaluation.md"
#: A built-in HIGH-risk rubric whose use case, criteria and risk level the adequacy prompt must carry.
RUBRIC = "clinical-guidance"
DETAILS = ["full", "decision"]

#: Each numbered instruction of the recovery seed: the seed's words the prompt's step of the same number must hold.
#: Step 1 names the generated answer too (the gate judges one), so its seed words are checked in two parts.
RECOVERY_STEPS: dict[int, tuple[str, ...]] = {
    1: ("Read the user question", "the retrieved context carefully."),
    2: ("Identify every factual claim that would be required to answer the question fully.",),
    3: ("For each required claim, check whether the retrieved context provides direct, unambiguous support.",),
    4: (
        "Classify the evidence as one of:",
        "- SUFFICIENT: All required claims are directly supported by the context.",
        "- PARTIALLY_SUFFICIENT: Some claims are supported, but others are missing or ambiguous.",
        "- INSUFFICIENT: The context lacks support for most or all required claims.",
    ),
    5: ("If the classification is SUFFICIENT, output the answer with inline citations",),
    6: (
        "If the classification is PARTIALLY_SUFFICIENT or INSUFFICIENT, do NOT generate an answer.",
        "Instead, output an abstention notice",
        "specific claims could not be supported",
        "retrieval queries to fill the gaps",
    ),
}
#: ``--detail decision`` asks for the classification alone, so the answer-or-abstain steps (5, 6) are not asked.
RECOVERY_STEPS_ASKED = {"full": (1, 2, 3, 4, 5, 6), "decision": (1, 2, 3, 4)}

#: The adequacy seed's input labels, as its template writes them (``**Label:**`` then the value).
ADEQUACY_INPUTS = ("User Question", "Retrieved Context", "Use Case", "Adequacy Rubric")

#: The seeds' output fields (quoted keys) and values, per gate and detail: the decision-only output is one field.
SCHEMA_FIELDS = {
    # The seed's supported_claims, unsupported_claims and answer are computed from a label per segment of the
    # response (issue 49): the model is asked for the labels instead, and the seed's names come back in --format seed.
    ("recovery", "full"): (
        "classification",
        "SUFFICIENT",
        "PARTIALLY_SUFFICIENT",
        "INSUFFICIENT",
        "abstention_notice",
        "suggested_retrieval_queries",
    ),
    ("recovery", "decision"): ("classification", "SUFFICIENT", "PARTIALLY_SUFFICIENT", "INSUFFICIENT"),
    ("adequacy", "full"): (
        "adequacy_decision",
        "PASS",
        "FAIL",
        "adequacy_score",
        "dimensions",
        "factual_coverage",
        "temporal_relevance",
        "source_authority",
        "entity_completeness",
        "rubric_alignment",
        "score",
        "assessment",
        "missing_information",
        "recommendation",
        "PROCEED_WITH_ANSWER",
        "RETRIEVE_MORE",
        "ESCALATE_TO_HUMAN",
        "FLAG_AS_UNANSWERABLE",
        "rationale",
    ),
    ("adequacy", "decision"): ("adequacy_decision", "PASS", "FAIL"),
}
SEED_OF = {"recovery": EIR, "adequacy": CAE}


def config(gate: str, detail: str) -> JudgeConfig:
    options = {"rubric": RUBRIC} if gate == "adequacy" else {}
    return JudgeConfig(gate=gate, detail=detail, options=options)


def rendered(gate: str, detail: str) -> tuple[str, str]:
    """The system and user messages the gate sends for :data:`RECORD`, through a real :class:`Judge`."""
    seen: list[GenerationRequest] = []

    def script(request: GenerationRequest) -> str:
        seen.append(request)
        return "{}"  # never a verdict: only the prompt is looked at

    Judge(ScriptedEngine(script), config=config(gate, detail)).judge_batch([RECORD])
    system, user = (m["content"] for m in seen[0].messages)
    return system, user


def section(text: str, heading: str) -> str:
    """The text under ``## heading`` up to the next ``## `` heading."""
    assert f"## {heading}\n" in text, f"no section {heading!r}"
    return text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]


def steps(text: str) -> dict[int, str]:
    """The numbered steps of an INSTRUCTIONS section, each with the lines under it, whitespace flattened."""
    parts = re.split(r"(?m)^(\d+)\. ", text)
    return {int(n): flat(body) for n, body in zip(parts[1::2], parts[2::2], strict=True)}


def missing_words(found: dict[int, str], wanted: dict[int, tuple[str, ...]]) -> list[str]:
    return [
        f"{n}: {words!r}" for n, all_words in wanted.items() for words in all_words if words not in found.get(n, "")
    ]


# -- recovery: every numbered instruction ---------------------------------------------------------------------


@pytest.mark.parametrize("detail", DETAILS)
def test_each_recovery_instruction_of_the_seed_is_in_the_prompt_under_its_number(detail):
    system, _ = rendered("recovery", detail)
    found = steps(section(system, "INSTRUCTIONS"))
    asked = {n: RECOVERY_STEPS[n] for n in RECOVERY_STEPS_ASKED[detail]}
    assert missing_words(found, asked) == [], f"the recovery prompt ({detail}) lost the seed's instructions"


@pytest.mark.skipif(not SEEDS.is_dir(), reason="the seeds (../shared/seeds) are not beside this checkout")
def test_the_recovery_words_guarded_are_the_seeds_and_cover_every_instruction():
    found = steps(section((SEEDS / EIR).read_text(encoding="utf-8"), "INSTRUCTIONS"))
    # The sub-list of the seed's step 6 is capitalised ("- Which specific claims ..."); the prompt runs it on.
    found = {n: text.lower() for n, text in found.items()}
    lowered = {n: tuple(w.lower() for w in words) for n, words in RECOVERY_STEPS.items()}
    assert missing_words(found, lowered) == []
    assert sorted(found) == sorted(RECOVERY_STEPS), "the seed's steps changed: guard each one here"


# -- adequacy: the inputs, filled from a real rubric ------------------------------------------------------------


@pytest.mark.parametrize("detail", DETAILS)
def test_the_adequacy_prompt_states_the_rubrics_use_case_risk_and_criteria_under_the_seeds_labels(detail):
    system, user = rendered("adequacy", detail)
    rubric = RubricStore().get(RUBRIC)
    assert rubric.use_case.strip() and rubric.criteria  # else the checks below hold for an empty rubric
    # The use case and risk level each on their label, as the seed's [USE_CASE] and [RISK_LEVEL].
    assert f"**Use Case:** {flat(rubric.use_case)} **Risk Level:** {rubric.risk_level}" in flat(system)
    # Every criterion of the rubric, numbered as the verdict numbers them, right under the seed's label (which names
    # the rubric applied), each critical one marked.
    listed = re.search(r"(?m)^\*\*Adequacy Rubric \(([^)]*)\):\*\*\n((?:\d+\. .*\n)+)", system)
    assert listed is not None, "no **Adequacy Rubric (...):** list"
    assert listed[1] == rubric.ref
    assert any(c.critical for c in rubric.criteria)  # else the marks below are not checked
    assert listed[2].splitlines() == [
        f"{n}. {c.text}" + (" (critical)" if c.critical else "") for n, c in enumerate(rubric.criteria, 1)
    ]
    # The question and the context under theirs.
    text = flat(user)
    for label, value in (("User Question", RECORD["question"]), ("Retrieved Context", RECORD["chunks"][0]["text"])):
        assert f"**{label}:**" in text and value in text.split(f"**{label}:**", 1)[1], label


@pytest.mark.skipif(not SEEDS.is_dir(), reason="the seeds (../shared/seeds) are not beside this checkout")
def test_the_adequacy_labels_guarded_are_the_seeds_inputs():
    inputs = section((SEEDS / CAE).read_text(encoding="utf-8"), "INPUTS")
    assert re.findall(r"\*\*(.+?):\*\*", inputs) == list(ADEQUACY_INPUTS)


# -- both: the output fields ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("gate", "detail"), list(SCHEMA_FIELDS))
def test_the_prompt_asks_for_the_seeds_output_fields(gate, detail):
    system, _ = rendered(gate, detail)
    asked = section(system, "OUTPUT SCHEMA" if detail == "full" else "OUTPUT")
    assert [f for f in SCHEMA_FIELDS[gate, detail] if f'"{f}"' not in asked] == []


@pytest.mark.skipif(not SEEDS.is_dir(), reason="the seeds (../shared/seeds) are not beside this checkout")
@pytest.mark.parametrize("gate", list(SEED_OF))
def test_the_output_fields_guarded_are_the_seeds(gate):
    schema = section((SEEDS / SEED_OF[gate]).read_text(encoding="utf-8"), "OUTPUT SCHEMA")
    # Keys are quoted in the seed; the recommendation's values are listed bare inside <...|...>.
    assert [f for f in SCHEMA_FIELDS[gate, "full"] if not re.search(rf'"{f}"|\b{f}\b', schema)] == []
