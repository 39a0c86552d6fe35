"""The routes every gate's computed decision ends in (shared by the harness)."""

from typing import Literal

#: deliver/proceed to the answer, retrieve more evidence, abstain with the gap
#: described, or queue for a person.
Route = Literal["deliver", "retrieve_more", "abstain", "human_review"]
