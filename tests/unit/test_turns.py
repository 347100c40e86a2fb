"""Turn structure for trimming the oldest turns."""

from optimize.chat.turns import trimmed, turn_bounds

S = {"role": "system", "content": "s"}


def u(text):
    return {"role": "user", "content": text}


def a(text, calls=None):
    return {"role": "assistant", "content": text, **({"tool_calls": calls} if calls else {})}


def tool(text):
    return {"role": "tool", "tool_call_id": "c1", "content": text}


def test_turns_start_at_user_messages_and_keep_calls_with_results():
    messages = [a("pre"), u("1"), a("x", [{"id": "c1"}]), tool("r"), a("y"), u("2"), a("z")]
    assert turn_bounds(messages) == [(0, 1), (1, 5), (5, 7)]


def test_trimming_keeps_system_and_final_turn():
    messages = [S, u("1"), a("one"), u("2"), a("x", [{"id": "c1"}]), tool("r"), a("two"), u("3"), a("three")]
    options = list(trimmed(messages))
    assert [count for count, _ in options] == [1, 2]
    assert options[0][1] == [S, u("2"), a("x", [{"id": "c1"}]), tool("r"), a("two"), u("3"), a("three")]
    assert options[1][1] == [S, u("3"), a("three")]


def test_single_turn_cannot_be_trimmed():
    assert list(trimmed([S, u("1"), a("one")])) == []
