"""The window's bytes as a running sum (`runtime.window`): after any sequence of the ways a
conversation changes, the meter's total is the sum of every message's window bytes, while
a save after appends measures only the messages appended."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from singularity.domain.records import ChatMessage
from singularity.runtime.window import WindowMeter, window_size

Change = tuple[str, int]
changes = st.lists(
    st.tuples(
        st.sampled_from(["append", "cut", "insert", "replace", "withhold"]), st.integers(0, 5)
    ),
    max_size=30,
)


def message(number: int) -> ChatMessage:
    return {"role": "user", "content": f"message {number} " + "ż" * (number % 7)}


@given(changes)
def test_the_total_is_the_sum_of_the_window_after_any_changes(steps: list[Change]) -> None:
    meter = WindowMeter()
    conversation: list[ChatMessage] = []
    for number, (kind, count) in enumerate(steps):
        if kind == "append":
            conversation.extend(message(number * 10 + i) for i in range(count))
        elif kind == "cut":
            meter.total(conversation)  # the being measures before it cuts
            leaving = min(count, len(conversation))
            meter.cut(conversation[:leaving])
            del conversation[:leaving]
        elif kind == "insert":
            conversation[count:count] = [message(number)]
        elif kind == "replace":
            conversation = list(conversation)
        elif conversation:  # a secret withheld: a message's values replaced in place
            changed = conversation[count % len(conversation)]
            changed["content"] = "[withheld]"
            meter.forget(changed)
        assert meter.total(conversation) == sum(map(window_size, conversation))


def test_a_total_after_appends_measures_only_what_was_appended() -> None:
    meter = WindowMeter()
    conversation = [message(number) for number in range(400)]
    meter.total(conversation)
    measured: list[ChatMessage] = []
    size = meter.size

    def counting(one: ChatMessage) -> int:
        measured.append(one)
        return size(one)

    meter.size = counting  # type: ignore[method-assign]
    conversation.append(message(400))
    meter.cut(conversation[:1])
    del conversation[:1]
    assert meter.total(conversation) == sum(map(window_size, conversation))
    assert measured == [conversation[-1]]
