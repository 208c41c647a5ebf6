"""Issue 15 item 5: the spec's spellings that voxflow renamed are accepted as aliases."""

from __future__ import annotations

import pytest

from voxflow import Flow, FlowState, start
from voxflow.conversation import NO_LLM_REPLY
from voxflow.errors import DeclarationError

pytestmark = pytest.mark.unit


class Counter(FlowState):
    count: int = 0


class Count(Flow[Counter]):
    @start()
    def bump(self) -> int:
        self.state.count += 1
        return self.state.count


def test_initial_state_is_an_alias_of_state() -> None:
    given = Counter(count=41)
    flow = Count(initial_state=given)
    assert flow.state is given
    assert flow.kickoff() == 42
    assert Count(state=Counter(count=1)).kickoff() == 2


def test_giving_both_spellings_is_a_type_error_naming_them() -> None:
    with pytest.raises(TypeError, match=r"state=.*initial_state="):
        Count(state=Counter(), initial_state=Counter())


def test_an_invalid_initial_state_is_rejected_like_state() -> None:
    with pytest.raises(TypeError, match="state must be"):
        Count(initial_state=3)  # type: ignore[arg-type]


DECLARATION = """
schema: {schema}
name: Ping
conversational:
  system_prompt: Terse.
methods:
  handle_ping:
    description: The user says ping.
    listen: ping
"""


@pytest.mark.parametrize("schema", ["voxflow.flow/v1", "crewai.flow/v1"])
def test_both_schema_ids_are_read(schema: str) -> None:
    flow = Flow.from_declaration(contents=DECLARATION.format(schema=schema))
    assert type(flow).__name__ == "Ping"
    assert type(flow).route_catalog().custom_labels() == ("ping",)
    assert flow.handle_turn("hello") == NO_LLM_REPLY


@pytest.mark.parametrize("schema", ["crewai.flow/v2", "voxflow.flow/v0", "", "1"])
def test_another_schema_id_names_the_voxflow_spelling(schema: str) -> None:
    with pytest.raises(DeclarationError, match=r"voxflow\.flow/v1") as info:
        Flow.from_declaration(contents=DECLARATION.format(schema=repr(schema)))
    assert info.value.errors[0][0] == "schema"
