"""Tool-call parsers read exactly what each family's chat template writes, and a call they cannot read stays text.

Where a family's real template is available (TRL's Qwen2.5, Llama 3.2 and Gemma 4 templates, Optimize's own
ChatML stand-in template) the expected answer text is rendered through it, so each test is a round trip:
arguments object -> template text -> `parse` -> the same object.
"""

from __future__ import annotations

import json
import signal
from importlib import resources

import pytest

from optimize.workloads.tool_calls import PARSERS, parse

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "book_table", "description": "Book a table",
                                      "parameters": {"type": "object", "properties": {"party": {"type": "object"}}}}},
]
QUESTION = [{"role": "user", "content": "What's the weather in Paris, and book us a table?"}]

# Arguments that stress each notation: a string with a comma (and a colon, brackets and braces), nested
# objects, a list of objects, numbers, booleans, null, an empty string and non-ASCII text.
WEATHER = {"city": "Paris, France", "units": "metric"}
BOOKING = {"party": {"size": 4, "names": ["Ana", "Bo, Jr."], "seating": {"outside": False, "level": None}},
           "time": "19:30", "note": "window seat: {quiet} [if possible], merci à vous", "budget": 120.5,
           "discount": -3, "tags": [], "empty": ""}


def template(name: str):
    """A chat template compiled exactly as Transformers' `apply_chat_template` compiles it."""
    from transformers.utils.chat_template_utils import _compile_jinja_template

    if name == "standin":
        source = resources.files("optimize.catalog").joinpath("standin_template.jinja").read_text(encoding="utf-8")
    else:
        source = resources.files("trl").joinpath("chat_templates", name).read_text(encoding="utf-8")
    return _compile_jinja_template(source)


def answer_text(compiled, calls: list[tuple[str, dict]], content: str = "", stop: str = "", **context) -> str:
    """The assistant message with these calls as the template writes it after the generation prompt, up to the
    end-of-turn token (a stop token, which the serving engine removes before parsing)."""
    message = {"role": "assistant", "content": content,
               "tool_calls": [{"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": arguments}}
                              for i, (name, arguments) in enumerate(calls)]}
    prompt = compiled.render(messages=QUESTION, tools=TOOLS, add_generation_prompt=True, **context)
    whole = compiled.render(messages=[*QUESTION, message], tools=TOOLS, add_generation_prompt=False, **context)
    assert whole.startswith(prompt)
    answer = whole[len(prompt):]
    return answer[:answer.index(stop)] if stop else answer


def read(parsed) -> list[tuple[str, object]]:
    """The parsed calls as (name, arguments object); checks the OpenAI shape on the way."""
    found = []
    for call in parsed.calls:
        assert call["type"] == "function" and call["id"].startswith("call_")
        assert isinstance(call["function"]["arguments"], str)  # OpenAI: arguments are a JSON string
        found.append((call["function"]["name"], json.loads(call["function"]["arguments"])))
    return found


def assert_stays_text(parser: str, text: str) -> None:
    parsed = parse(parser, text)
    assert parsed.calls == [] and parsed.content == text


# --- hermes ----------------------------------------------------------------------------------------------


def test_hermes_reads_two_calls_as_the_qwen25_template_writes_them():
    text = answer_text(template("qwen2_5.jinja"), [("get_weather", WEATHER), ("book_table", BOOKING)],
                       stop="<|im_end|>")
    assert text.count("<tool_call>") == 2
    parsed = parse("hermes", text)
    assert read(parsed) == [("get_weather", WEATHER), ("book_table", BOOKING)]
    assert parsed.content is None


def test_hermes_keeps_the_text_before_the_calls_as_the_standin_chatml_template_writes_it():
    text = answer_text(template("standin"), [("get_weather", WEATHER), ("book_table", BOOKING)],
                       content="Let me check that for you.", stop="<|im_end|>")
    parsed = parse("hermes", text)
    assert parsed.content == "Let me check that for you."
    assert read(parsed) == [("get_weather", WEATHER), ("book_table", BOOKING)]


def test_hermes_reads_parameters_and_a_call_without_arguments():
    text = ('<tool_call>{"name": "get_weather", "parameters": {"city": "Oslo"}}</tool_call>\n'
            '<tool_call>{"name": "now"}</tool_call>')
    assert read(parse("hermes", text)) == [("get_weather", {"city": "Oslo"}), ("now", {})]


@pytest.mark.parametrize("text", [
    'Sure. <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}</tool_call>',  # a brace short
    "<tool_call>get_weather(city='Paris')</tool_call>",  # not JSON
    '<tool_call>{"arguments": {"city": "Paris"}}</tool_call>',  # no name
    '<tool_call>["get_weather", {"city": "Paris"}]</tool_call>',  # not an object
    '<tool_call>{"name": "get_weather", "arguments": {"city": "Par',  # cut before the closing tag
    'I would call {"name": "get_weather"} but no tool fits.',  # no tags at all
], ids=["bad-json", "not-json", "no-name", "a-list", "unclosed", "no-tags"])
def test_hermes_leaves_a_call_it_cannot_read_as_text(text):
    assert_stays_text("hermes", text)


def test_hermes_never_drops_a_call_cut_off_after_a_complete_one():
    text = ('<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>\n'
            '<tool_call>{"name": "book_table", "arguments": {"party": {"si')
    parsed = parse("hermes", text)
    assert '"book_table"' in (parsed.content or "")  # as text, alone or after the call that was read


# --- llama3_json -----------------------------------------------------------------------------------------


def test_llama3_json_reads_a_call_as_the_llama32_template_writes_it():
    # Llama 3.2's template writes one call a message (it refuses more), as {"name": .., "parameters": ..}
    text = answer_text(template("llama3_2.jinja"), [("book_table", BOOKING)], stop="<|eot_id|>",
                       bos_token="<|begin_of_text|>", date_string="26 Jul 2024")
    parsed = parse("llama3_json", text)
    assert read(parsed) == [("book_table", BOOKING)] and parsed.content is None


def test_llama3_json_reads_several_calls_after_the_python_tag():
    text = ('<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris, France"}}; '
            '{"name": "book_table", "parameters": {"party": {"size": 2}}}')
    assert read(parse("llama3_json", text)) == [("get_weather", {"city": "Paris, France"}),
                                                ("book_table", {"party": {"size": 2}})]


@pytest.mark.parametrize("text", [
    "The weather in Paris is mild.",
    '{"city": "Paris"}',  # an object, but not a call
    '{"name": "get_weather", "parameters": {"city": "Paris"}',  # a brace short
    '[{"name": "get_weather", "parameters": {}}]',  # a list
    'Here you go: {"name": "get_weather", "parameters": {}}',  # text before the object
], ids=["prose", "no-name", "bad-json", "a-list", "text-first"])
def test_llama3_json_leaves_what_is_not_a_call_as_text(text):
    assert_stays_text("llama3_json", text)


def test_llama3_json_reads_a_call_whose_argument_holds_a_semicolon():
    text = '{"name": "run_sql", "parameters": {"query": "SELECT 1; SELECT 2"}}'
    assert read(parse("llama3_json", text)) == [("run_sql", {"query": "SELECT 1; SELECT 2"})]


# --- gemma4 ----------------------------------------------------------------------------------------------

GEMMA_CALLS = [("get_weather", WEATHER), ("book_table", BOOKING), ("list_tables", {})]


def test_gemma4_reads_the_calls_the_shipped_gemma4_template_writes():
    text = answer_text(template("gemma4_v5.jinja"), GEMMA_CALLS, stop="<|tool_response>", bos_token="<bos>")
    assert '<|tool_call>call:get_weather{city:<|"|>Paris, France<|"|>,units:<|"|>metric<|"|>}<tool_call|>' in text
    parsed = parse("gemma4", text)
    assert read(parsed) == GEMMA_CALLS and parsed.content is None


def test_gemma4_keeps_the_text_before_the_calls_as_optimizes_corrected_template_writes_it():
    from transformers.utils.chat_template_utils import _compile_jinja_template

    from optimize.chat.corrections import corrected_template

    shipped = resources.files("trl").joinpath("chat_templates", "gemma4_v5.jinja").read_text(encoding="utf-8")
    compiled = _compile_jinja_template(corrected_template("gemma4", shipped))
    text = answer_text(compiled, GEMMA_CALLS, content="Checking both.", stop="<|tool_response>", bos_token="<bos>")
    assert text.startswith("Checking both.<|tool_call>")
    parsed = parse("gemma4", text)
    assert parsed.content == "Checking both." and read(parsed) == GEMMA_CALLS


def test_gemma4_parsed_arguments_render_back_to_the_same_text():
    compiled = template("gemma4_v5.jinja")
    text = answer_text(compiled, GEMMA_CALLS, stop="<|tool_response>", bos_token="<bos>")
    again = answer_text(compiled, read(parse("gemma4", text)), stop="<|tool_response>", bos_token="<bos>")
    assert again == text


@pytest.mark.parametrize("text", [
    '<|tool_call>call:get_weather{city:<|"|>Paris}<tool_call|>',  # a string never closed
    "<|tool_call>call:get_weather{city}<tool_call|>",  # a key without a value
    '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>]}<tool_call|>',  # a bracket that closes nothing
    '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>}',  # no closing tag
    'call:get_weather{city:<|"|>Paris<|"|>}<tool_call|>',  # no opening tag
], ids=["open-string", "no-value", "stray-bracket", "unclosed", "no-opening-tag"])
def test_gemma4_leaves_a_call_it_cannot_read_as_text(text):
    assert_stays_text("gemma4", text)


class _TooSlow(Exception):
    pass


def test_gemma4_a_list_left_open_stays_text_promptly():
    def stop(*_):
        raise _TooSlow

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, 2.0)
    try:
        parsed = parse("gemma4", '<|tool_call>call:get_weather{days:[1,2}<tool_call|>')
    except _TooSlow:
        pytest.fail("parse did not return within 2 seconds")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert parsed.calls == []


# --- mistral ---------------------------------------------------------------------------------------------


def test_mistral_reads_a_list_of_calls_after_the_marker_and_keeps_the_text_before():
    calls = [{"name": "get_weather", "arguments": WEATHER}, {"name": "book_table", "arguments": BOOKING}]
    parsed = parse("mistral", "On it.[TOOL_CALLS] " + json.dumps(calls))
    assert parsed.content == "On it."
    assert read(parsed) == [("get_weather", WEATHER), ("book_table", BOOKING)]


def test_mistral_reads_a_single_call_object():
    assert read(parse("mistral", '[TOOL_CALLS]{"name": "get_weather", "arguments": {"city": "Rome"}}')) == \
        [("get_weather", {"city": "Rome"})]


@pytest.mark.parametrize("text", [
    '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Rome"}',  # cut off
    '[TOOL_CALLS] [{"arguments": {"city": "Rome"}}]',  # no name
    '[TOOL_CALLS] ["get_weather"]',  # not objects
    "No calls here, just [brackets].",
], ids=["cut-off", "no-name", "not-objects", "no-marker"])
def test_mistral_leaves_a_call_it_cannot_read_as_text(text):
    assert_stays_text("mistral", text)


# --- every parser ----------------------------------------------------------------------------------------

A_CALL = {
    "hermes": '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>',
    "llama3_json": '{"name": "get_weather", "parameters": {"city": "Paris"}}',
    "gemma4": '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>}<tool_call|>',
    "mistral": '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}]',
}


def test_every_parser_is_covered_here():
    assert set(A_CALL) == set(PARSERS)


@pytest.mark.parametrize("parser", [None, "", "unknown"])
def test_a_model_without_a_known_parser_answers_text_only(parser):
    for text in A_CALL.values():
        assert_stays_text(parser, text)


@pytest.mark.parametrize("parser", PARSERS)
def test_each_parser_reads_a_minimal_call(parser):
    assert read(parse(parser, A_CALL[parser])) == [("get_weather", {"city": "Paris"})]


@pytest.mark.parametrize("parser", PARSERS)
def test_plain_text_is_returned_unchanged(parser):
    text = "  It is sunny in Paris, 21°C.\n"
    assert_stays_text(parser, text)


@pytest.mark.parametrize("parser", PARSERS)
def test_call_ids_are_unique_within_and_across_answers(parser):
    twice = {"hermes": A_CALL["hermes"] * 2, "llama3_json": A_CALL["llama3_json"] + ";" + A_CALL["llama3_json"],
             "gemma4": A_CALL["gemma4"] * 2,
             "mistral": "[TOOL_CALLS] " + json.dumps([{"name": "get_weather", "arguments": {"city": "Paris"}}] * 2)}
    ids = [call["id"] for _ in range(3) for call in parse(parser, twice[parser]).calls]
    assert len(ids) == 6 and len(set(ids)) == 6


def test_an_answer_calling_a_tool_not_offered_stays_text():
    person = '{"name": "Bob", "parameters": {"age": 3}}'  # JSON with a name, not a call of an offered tool
    assert parse("llama3_json", person, {"get_weather"}).calls == []
    assert parse("llama3_json", person, {"get_weather"}).content == person
    offered = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    assert [c["function"]["name"] for c in parse("hermes", offered, {"get_weather"}).calls] == ["get_weather"]
