import math

import pytest

from suffice.grammars.scores import decision_probabilities

TEXT = '{"required_entities":[],"is_sufficient":true,"missing_information":[]}'


def split(text, cuts):
    out, last = [], 0
    for c in [*cuts, len(text)]:
        out.append(text[last:c])
        last = c
    return out


def test_probabilities_sum_partial_and_overrunning_tokens():
    marker = '"is_sufficient":'
    start = TEXT.index(marker) + len(marker)
    tokens = split(TEXT, [start - 2, start + 4])  # the decision token is '":true' (forced prefix '":')
    top = [{} for _ in tokens]
    top[1] = {'":true': math.log(0.5), '":t': math.log(0.1), '":false': math.log(0.3), '":f': math.log(0.05), '"': -1.0}
    probs = decision_probabilities(TEXT, tokens, top, marker, ("true", "false"))
    assert probs == pytest.approx({"true": 0.6 / 0.95, "false": 0.35 / 0.95})


def test_classes_by_prefix():
    text = '{"classification":"PARTIALLY_SUFFICIENT","supported_claims":[]}'
    marker = '{"classification":"'
    tokens = split(text, [len(marker), len(marker) + 4])
    top = [{} for _ in tokens]
    top[1] = {"PART": math.log(0.7), "SU": math.log(0.2), "IN": math.log(0.1)}
    probs = decision_probabilities(text, tokens, top, marker, ("SUFFICIENT", "PARTIALLY_SUFFICIENT", "INSUFFICIENT"))
    assert probs == pytest.approx({"SUFFICIENT": 0.2, "PARTIALLY_SUFFICIENT": 0.7, "INSUFFICIENT": 0.1})


def test_unlocatable_positions_give_none():
    assert decision_probabilities(TEXT, [TEXT], [{}], '"nope":', ("true", "false")) is None
    assert decision_probabilities(TEXT, ["x" * len(TEXT)], [{"true": 0.0}], '"is_sufficient":', ("true",)) is None
    tokens = split(TEXT, [10])
    assert decision_probabilities(TEXT, tokens, [{}, {"zzz": 0.0}], '"is_sufficient":', ("true", "false")) is None


def test_a_shared_prefix_of_the_values_is_skipped():
    text = '{"adequacy_decision":"FAIL","adequacy_score":0.2}'
    marker = '"adequacy_decision":'
    cut = text.index(marker) + len(marker) + 1  # the token '"' is forced; the next decides
    tokens = split(text, [cut - 1, cut, cut + 2])
    top = [{} for _ in tokens]
    top[2] = {"FA": math.log(0.6), "PASS": math.log(0.3), "P": math.log(0.1)}
    probs = decision_probabilities(text, tokens, top, marker, ('"PASS"', '"FAIL"'))
    assert probs == pytest.approx({'"PASS"': 0.4, '"FAIL"': 0.6})
