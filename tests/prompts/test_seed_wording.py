"""The sentences of each prompt that carry a seed's instructions (shared/seeds/): each must stay in the prompt the
gate renders, and docs/seeds.md cites each to its seed (file and section).

Removing one of them from a template is a change of what the gate asks the model, which this test makes a
decision to take (and to record here and in docs/seeds.md), not an accident of an edit.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

import pytest

from suffice.config import JudgeConfig
from suffice.judge import Judge
from suffice.serving.base import GenerationRequest
from tests.fakes import ScriptedEngine

ROOT = Path(__file__).resolve().parents[2]
SEEDS = ROOT.parent / "shared" / "seeds"
DOC = ROOT / "docs" / "seeds.md"

SUFFICIENCY = "gates/sufficiency/templates/v6/system.j2"
RECOVERY = "gates/recovery/templates/v4/system.j2"
ADEQUACY = "gates/adequacy/templates/v5/system.j2"
RAGFLOW = "ragflow-sufficiency-select.md"
EIR = "evidence-insufficiency-recovery.md"
CAE = "context-adequacy-evaluation.md"


class Carried(NamedTuple):
    """A sentence of a template as the prompt renders it, and the seed's words it carries (where they differ)."""

    template: str
    sentence: str
    seed: str
    section: str
    seed_words: str | None = None


CARRIED = [
    # Sufficiency: the criterion, the six-step procedure, the requirements (confidence bands included).
    Carried(
        SUFFICIENCY,
        "Determine whether the retrieved content is sufficient to answer the user's question(s), following the "
        '"Sufficient Context" criterion:',
        RAGFLOW,
        "opening",
    ),
    Carried(
        SUFFICIENCY,
        "The CONTEXT is sufficient to answer the question if and only if a PLAUSIBLE answer can be inferred from it "
        "— that is, the retrieved content either directly contains or logically entails an answer to the question.",
        RAGFLOW,
        "opening",
    ),
    Carried(
        SUFFICIENCY,
        "The answer does NOT need to be proven correct; it only needs to be a reasonable, supportable answer.",
        RAGFLOW,
        "opening",
    ),
    Carried(
        SUFFICIENCY,
        "If the context cannot be used to infer any plausible answer, it is INSUFFICIENT.",
        RAGFLOW,
        "opening",
    ),
    Carried(
        SUFFICIENCY, "Reasoning procedure (do this step-by-step before answering):", RAGFLOW, "Reasoning procedure"
    ),
    Carried(
        SUFFICIENCY,
        "1. Identify the REQUIRED ENTITIES or key facts that a plausible answer to the question must involve.",
        RAGFLOW,
        "Reasoning procedure",
    ),
    Carried(
        SUFFICIENCY,
        "2. For each required entity, check whether the retrieved content provides evidence about it.",
        RAGFLOW,
        "Reasoning procedure",
    ),
    Carried(
        SUFFICIENCY,
        "3. Check for multi-hop inference: if answering requires combining facts not present in the context, or "
        "inferring a connection the context does not state, that is NOT inferable from the context.",
        RAGFLOW,
        "Reasoning procedure",
    ),
    Carried(
        SUFFICIENCY,
        "4. Check whether the context is ambiguous: if it could support multiple mutually exclusive plausible answers "
        "and nothing in the context lets you distinguish them, mark it insufficient.",
        RAGFLOW,
        "Reasoning procedure",
    ),
    Carried(
        SUFFICIENCY,
        '5. Note any internally conflicting figures/statements in the context ("contradictions").',
        RAGFLOW,
        "Reasoning procedure",
    ),
    Carried(
        SUFFICIENCY,
        "6. Decide whether a plausible answer can be inferred; give your confidence in that decision.",
        RAGFLOW,
        "Reasoning procedure",
    ),
    Carried(
        SUFFICIENCY,
        "1. is_sufficient must be true if and only if a plausible answer can be inferred from the context (per the "
        "definition above).",
        RAGFLOW,
        "Requirements",
        "Sufficient Context / is_sufficient must be true if and only if a plausible answer can be inferred from the "
        "context (per the definition above).",
    ),
    Carried(
        SUFFICIENCY,
        "A missing detail that a reasonable answer would still require makes it false",
        RAGFLOW,
        "Requirements",
    ),
    Carried(SUFFICIENCY, "2. If not sufficient, list the concrete missing_information", RAGFLOW, "Requirements"),
    Carried(SUFFICIENCY, "Missing required entities belong in missing_information.", RAGFLOW, "Requirements"),
    Carried(
        SUFFICIENCY,
        "4. confidence (0-1): how confident you are in your sufficiency decision. 0.9-1.0 if the context clearly "
        "supports or clearly fails a plausible answer; 0.5-0.7 if evidence is partial or ambiguous; below 0.5 if you "
        "cannot tell.",
        RAGFLOW,
        "Requirements",
    ),
    Carried(
        SUFFICIENCY,
        "5. contradictions: list any internally conflicting figures/statements that would make a single answer "
        "ambiguous. Empty array when none.",
        RAGFLOW,
        "Requirements",
    ),
    Carried(SUFFICIENCY, "Exclude irrelevant or redundant chunks.", RAGFLOW, "Requirements"),
    Carried(
        SUFFICIENCY,
        "7. The missing_information should only be filled when insufficient, otherwise an empty array.",
        RAGFLOW,
        "Requirements",
    ),
    # Recovery: the role, the threshold, the procedure, the three classes, answer or abstain, the constraints.
    Carried(RECOVERY, "You are an evidence sufficiency evaluator.", EIR, "template"),
    Carried(
        RECOVERY,
        "Your job is to determine whether the provided context contains enough information to support the generated "
        "answer to the user's question accurately and completely.",
        EIR,
        "template",
        "Your job is to determine whether the provided context contains enough information to answer the user's "
        "question accurately and completely.",
    ),
    Carried(
        RECOVERY, "Sufficiency Threshold: at least", EIR, "INPUTS", "Sufficiency Threshold: [SUFFICIENCY_THRESHOLD]"
    ),
    Carried(
        RECOVERY,
        "2. Identify every factual claim that would be required to answer the question fully.",
        EIR,
        "INSTRUCTIONS",
    ),
    Carried(
        RECOVERY,
        "3. For each required claim, check whether the retrieved context provides direct, unambiguous support.",
        EIR,
        "INSTRUCTIONS",
    ),
    Carried(RECOVERY, "- SUFFICIENT: All required claims are directly supported by the context.", EIR, "INSTRUCTIONS"),
    Carried(
        RECOVERY,
        "- PARTIALLY_SUFFICIENT: Some claims are supported, but others are missing or ambiguous.",
        EIR,
        "INSTRUCTIONS",
    ),
    Carried(
        RECOVERY, "- INSUFFICIENT: The context lacks support for most or all required claims.", EIR, "INSTRUCTIONS"
    ),
    Carried(
        RECOVERY,
        "5. If the classification is SUFFICIENT, output the answer with inline citations",
        EIR,
        "INSTRUCTIONS",
    ),
    Carried(
        RECOVERY,
        "6. If the classification is PARTIALLY_SUFFICIENT or INSUFFICIENT, do NOT generate an answer. Instead, output "
        "an abstention notice",
        EIR,
        "INSTRUCTIONS",
    ),
    Carried(
        RECOVERY,
        "- Never fabricate citations or claim support that does not exist in the context.",
        EIR,
        "CONSTRAINTS",
    ),
    Carried(
        RECOVERY,
        "- If you are unsure about support for any claim, classify as PARTIALLY_SUFFICIENT.",
        EIR,
        "CONSTRAINTS",
    ),
    # Adequacy: the role, the constraints, the risk-level rule.
    Carried(
        ADEQUACY,
        "You are a context adequacy evaluator for a retrieval-augmented generation pipeline. Your job is to determine "
        "whether the retrieved context is sufficient to answer the user's question for the specified use case, "
        "following a strict adequacy rubric.",
        CAE,
        "template",
    ),
    Carried(
        ADEQUACY,
        "- Base your assessment ONLY on the retrieved context provided. Do not use external knowledge.",
        CAE,
        "CONSTRAINTS",
    ),
    Carried(
        ADEQUACY,
        "- If the context contains contradictory information, note this in the rationale and factor it into the "
        "adequacy score.",
        CAE,
        "CONSTRAINTS",
    ),
    Carried(
        ADEQUACY,
        "- A PASS decision requires all rubric criteria to be met at an acceptable threshold. Partial coverage that "
        "fails any critical criterion must result in FAIL.",
        CAE,
        "CONSTRAINTS",
    ),
    Carried(
        ADEQUACY,
        "- The adequacy_score must reflect the weighted importance of rubric criteria, not a simple average of "
        "dimension scores.",
        CAE,
        "CONSTRAINTS",
    ),
    Carried(
        ADEQUACY,
        "- If the question requires information from multiple documents and only one is present, flag this in "
        "missing_information.",
        CAE,
        "CONSTRAINTS",
    ),
    Carried(
        ADEQUACY,
        "- For HIGH risk use cases, err toward FAIL when evidence is ambiguous or incomplete.",
        CAE,
        "CONSTRAINTS",
        "- For [RISK_LEVEL] use cases, err toward FAIL when evidence is ambiguous or incomplete.",
    ),
]

RECORD = {
    "id": "q",
    "question": "Who wrote the notes?",
    "response": "Ada Lovelace wrote the notes.",
    "chunks": [{"id": 0, "text": "Ada Lovelace wrote the notes.", "source": "ada.txt"}],
}
#: Each template rendered as its gate sends it: the full verdict, adequacy under a HIGH-risk rubric.
CONFIGS = {
    SUFFICIENCY: JudgeConfig(gate="sufficiency"),
    RECOVERY: JudgeConfig(gate="recovery"),
    ADEQUACY: JudgeConfig(gate="adequacy", options={"rubric": "legal-review"}),
}


def rendered(template: str) -> str:
    seen: list[GenerationRequest] = []

    def script(request: GenerationRequest) -> str:
        seen.append(request)
        return "{}"  # never a verdict: only the prompt is looked at

    Judge(ScriptedEngine(script), config=CONFIGS[template]).judge_batch([RECORD])
    return seen[0].messages[0]["content"]


def flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


@pytest.mark.parametrize("template", list(CONFIGS))
def test_every_sentence_carrying_a_seed_instruction_is_in_the_prompt(template):
    prompt = flat(rendered(template))
    missing = [c.sentence for c in CARRIED if c.template == template and flat(c.sentence) not in prompt]
    assert missing == [], f"{template} lost the seed's wording: {missing}"


def cited_rows() -> set[tuple[str, str, str, str]]:
    """The rows of docs/seeds.md's table of carried sentences: (template, sentence, seed, section)."""
    text = DOC.read_text(encoding="utf-8")
    part = text.split("## The seeds' wording, sentence by sentence", 1)[1].split("\n## ", 1)[0]
    rows = set()
    for line in part.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and cells[0].startswith("`gates/"):
            rows.add((cells[0].strip("`"), cells[1], cells[2].strip("`"), cells[3]))
    return rows


def test_docs_cite_every_carried_sentence_to_its_seed_and_nothing_else():
    wanted = {(c.template, c.sentence, c.seed, c.section) for c in CARRIED}
    rows = cited_rows()
    assert wanted - rows == set(), "docs/seeds.md does not cite these"
    assert rows - wanted == set(), "docs/seeds.md cites sentences this test does not guard"


@pytest.mark.skipif(not SEEDS.is_dir(), reason="the seeds (../shared/seeds) are not beside this checkout")
def test_each_seed_holds_the_words_it_is_cited_for():
    for c in CARRIED:
        seed = flat((SEEDS / c.seed).read_text(encoding="utf-8"))
        words = c.seed_words if c.seed_words is not None else c.sentence
        # Numbered steps and list marks are the template's own layout.
        words = re.sub(r"^(\d+\. |- )", "", flat(words))
        assert words in seed, f"{c.seed} does not say {words!r}"
        if c.section not in ("opening", "template"):
            assert c.section in seed, f"{c.seed} has no section {c.section!r}"


def test_the_templates_the_docs_cite_are_the_ones_in_the_code():
    # A version bump must move the docs with it: each cited template exists, and each gate's version named in the
    # docs that say what each mode decides is the one the gate renders now.
    from suffice.config import JudgeConfig as Config

    current = {gate: Config(gate=gate, options=options).make_gate().prompt_version for gate, options in VERSIONED}
    for doc in ("seeds.md", "gates.md", "judge.md"):
        text = (ROOT / "docs" / doc).read_text(encoding="utf-8")
        for path in set(re.findall(r"gates/\w+/templates/v\d+/\w+\.j2", text)):
            assert (ROOT / "suffice" / path).is_file(), f"docs/{doc} cites {path}, which is not in the code"
        for gate, version in set(re.findall(r"\b(sufficiency|recovery|adequacy)/(v\d+)\b", text)):
            assert f"{gate}/{version}" == current[gate], f"docs/{doc} cites {gate}/{version}, not {current[gate]}"


VERSIONED = (("sufficiency", {}), ("recovery", {}), ("adequacy", {"rubric": "legal-review"}))
