"""The order and admission rules both engines keep (suffice.serving.scheduling), with no engine: items are plain
strings, a request of ``n`` prompt tokens and a constraint whose output is counted at :data:`OUT` until taught."""

from __future__ import annotations

from suffice.grammars.constraint import Constraint
from suffice.serving.scheduling import KVBudget, Scheduler, shared_prefix

WORDS = Constraint(pattern="[a-z]+", max_bytes=20, key="words")
#: The output tokens a request of WORDS is counted at before one has finished.
OUT = 21


def prompt(first: int, n: int = 10) -> list[int]:
    """``n`` token ids sharing nothing with another first id's."""
    return [first] * n


def started(scheduler: Scheduler[str], given_up: frozenset[str] = frozenset()) -> list[tuple[str, int]]:
    return list(scheduler.admit(lambda item: item in given_up))


def test_the_constraint_counts_the_output_the_tests_assume():
    assert WORDS.max_completion_tokens == OUT


def test_items_start_in_the_order_they_were_queued_ranked_by_it():
    scheduler: Scheduler[str] = Scheduler(None)
    for i, name in enumerate("cab"):
        scheduler.queue(name, prompt(i), WORDS)
    assert started(scheduler) == [("c", 0), ("a", 1), ("b", 2)]
    scheduler.queue("d", prompt(9), WORDS)
    assert started(scheduler) == [("d", 3)]  # ranks go on across calls


def test_an_item_starts_only_while_every_started_one_fits():
    scheduler: Scheduler[str] = Scheduler(2 * (10 + OUT))
    for i, name in enumerate("abc"):
        scheduler.queue(name, prompt(i), WORDS)
    assert [item for item, _ in started(scheduler)] == ["a", "b"]
    assert scheduler.waiting == 1 and scheduler.budget.held == 2 * (10 + OUT)
    scheduler.finish("a", OUT)
    assert [item for item, _ in started(scheduler)] == ["c"]


def test_a_later_small_item_does_not_pass_one_waiting_for_room():
    scheduler: Scheduler[str] = Scheduler(2 * (10 + OUT))
    scheduler.queue("a", prompt(1), WORDS)
    scheduler.queue("big", prompt(2, 100), WORDS)
    scheduler.queue("small", prompt(3, 1), WORDS)  # would fit beside "a"
    assert started(scheduler) == [("a", 0)]
    scheduler.finish("a", OUT)
    assert started(scheduler) == [("big", 1)]  # the first always starts, whatever its size
    assert started(scheduler) == []
    scheduler.finish("big", OUT)
    assert started(scheduler) == [("small", 2)]


def test_an_item_given_up_passes_its_turn_holding_nothing():
    scheduler: Scheduler[str] = Scheduler(10 + OUT)
    scheduler.queue("a", prompt(1), WORDS)
    scheduler.queue("gone", prompt(2), WORDS)
    scheduler.queue("b", prompt(3), WORDS)
    assert started(scheduler) == [("a", 0)]
    scheduler.finish("a", OUT)
    assert started(scheduler, frozenset({"gone"})) == [("b", 1)]
    assert scheduler.waiting == 0 and scheduler.budget.started == 1


def test_given_up_is_asked_of_the_next_item_only_once_the_one_before_was_handled():
    scheduler: Scheduler[str] = Scheduler(None)
    scheduler.queue("a", prompt(1), WORDS)
    scheduler.queue("b", prompt(2), WORDS)
    handled: set[str] = set()
    for item, _ in scheduler.admit(lambda item: item == "b" and "a" in handled):
        handled.add(item)
    assert handled == {"a"}  # "a" failing its job gives "b" up before "b" starts


def test_a_finished_output_teaches_the_estimate_of_its_constraint_only():
    budget = KVBudget(None)
    other = Constraint(pattern="[a-z]+", max_bytes=20, key="other")
    assert budget.cost(prompt(1), WORDS) == 10 + OUT
    budget.take(10 + OUT, prompt(1))
    budget.finish(10 + OUT, WORDS.key, 8)
    assert budget.cost(prompt(2), WORDS) == 10 + 8 + 8 // 4
    assert budget.cost(prompt(2), other) == 10 + OUT


def test_a_dropped_item_returns_its_tokens_and_teaches_nothing():
    scheduler: Scheduler[str] = Scheduler(None)
    scheduler.queue("a", prompt(1), WORDS)
    started(scheduler)
    scheduler.drop("a")
    scheduler.drop("never started")
    assert (scheduler.budget.started, scheduler.budget.held) == (0, 0)
    assert scheduler.budget.cost(prompt(2), WORDS) == 10 + OUT


def test_an_engine_failure_returns_every_started_items_tokens():
    scheduler: Scheduler[str] = Scheduler(None)
    for i, name in enumerate("ab"):
        scheduler.queue(name, prompt(i), WORDS)
    started(scheduler)
    scheduler.drop_started()
    assert (scheduler.budget.started, scheduler.budget.held) == (0, 0)
    scheduler.finish("a", 5)  # already gone: nothing counted twice
    assert scheduler.budget.held == 0


def test_a_prefix_shared_with_the_prompt_started_before_is_counted_once():
    scheduler: Scheduler[str] = Scheduler(None)
    scheduler.queue("a", [1, 2, 3, 4], WORDS)
    scheduler.queue("b", [1, 2, 3, 9], WORDS)
    started(scheduler)
    assert scheduler.budget.held == (4 + OUT) + (1 + OUT)
    assert shared_prefix([1, 2, 3], [1, 2]) == 2
