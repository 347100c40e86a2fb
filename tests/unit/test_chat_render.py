"""Rendering real rows through every stand-in family: masks checked token by token against the decoded text."""

from __future__ import annotations

import hashlib

import pytest

from optimize.chat.render import LossPolicy, RenderError
from optimize.chat.template_checks import check_row_template

FAMILIES = ["llama3.2", "qwen2.5", "gemma4", "smollm2"]
STOP = {"llama3.2": "<|eot_id|>", "qwen2.5": "<|im_end|>", "gemma4": "<turn|>", "smollm2": "<|im_end|>"}
TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "Find an order",
                                           "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]


def call(arguments, call_id="c1"):
    return {"id": call_id, "type": "function", "function": {"name": "lookup", "arguments": arguments}}


PLAIN = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi."},
                      {"role": "assistant", "content": "Hi there."}]}
MULTI = {"messages": [{"role": "user", "content": "One?"}, {"role": "assistant", "content": "First answer."},
                      {"role": "user", "content": "Two?"}, {"role": "assistant", "content": "Second answer."}]}
TOOL_ROW = {"messages": [{"role": "user", "content": "Where is order 12?"},
                         {"role": "assistant", "content": "Checking.", "tool_calls": [call('{"q": "12"}')]},
                         {"role": "tool", "tool_call_id": "c1", "content": "shipped"},
                         {"role": "assistant", "content": "It shipped."}], "tools": TOOLS}


def trained_text(renderer, rendered) -> str:
    return renderer.tokenizer.decode([t for t, m in zip(rendered.input_ids, rendered.loss_mask, strict=True) if m])


def assert_mask_matches_spans(rendered):
    """Every trained token lies in a trained span, and every span's characters are covered by trained tokens."""
    for (start, end), flag in zip(rendered.offsets, rendered.loss_mask, strict=True):
        inside = any(s <= start < e for s, e in rendered.spans)
        assert bool(flag) == (inside and end > start)


@pytest.mark.parametrize("family", FAMILIES)
def test_default_policy_trains_only_the_final_answer(renderers, family):
    renderer = renderers[family]
    rendered = renderer.render(MULTI)
    text = trained_text(renderer, rendered)
    assert text.startswith("Second answer." + STOP[family])
    assert "First answer." not in text
    assert_mask_matches_spans(rendered)
    assert rendered.loss_mask[0] == 0


@pytest.mark.parametrize("family", FAMILIES)
def test_assistant_turns_all_trains_every_answer(renderers, family):
    renderer = renderers[family]
    rendered = renderer.render(MULTI, LossPolicy(assistant_turns="all"))
    text = trained_text(renderer, rendered)
    assert "First answer." + STOP[family] in text and "Second answer." + STOP[family] in text
    assert "One?" not in text and "Two?" not in text
    assert_mask_matches_spans(rendered)


@pytest.mark.parametrize("family", FAMILIES)
def test_answer_with_calls_trains_whole_whatever_train_on_tool_calls_says(renderers, family):
    renderer = renderers[family]
    row = {"messages": [{"role": "user", "content": "Find 12."},
                        {"role": "assistant", "content": "On it.", "tool_calls": [call({"q": "12"})]}],
           "tools": TOOLS}
    for flag in (True, False):
        text = trained_text(renderer, renderer.render(row, LossPolicy(train_on_tool_calls=flag)))
        # Gemma 4 ends a model turn that calls tools by opening the tool response, where generation stops.
        stop = "<|tool_response>" if family == "gemma4" else STOP[family]
        assert "lookup" in text and text.rstrip("\n").endswith(stop)
        if family != "llama3.2":  # Llama 3.2's template drops text beside a call (a template finding)
            assert "On it." in text


@pytest.mark.parametrize("family", ["qwen2.5", "smollm2"])
def test_train_on_tool_calls_false_trains_earlier_text_without_calls(renderers, family):
    renderer = renderers[family]
    with_calls = trained_text(renderer, renderer.render(TOOL_ROW, LossPolicy("all", True)))
    without = trained_text(renderer, renderer.render(TOOL_ROW, LossPolicy("all", False)))
    assert "Checking." in with_calls and "lookup" in with_calls
    assert "Checking." in without and "lookup" not in without and "It shipped." in without


@pytest.mark.parametrize("family", FAMILIES)
def test_json_string_arguments_render_as_the_object(renderers, family):
    renderer = renderers[family]
    as_string = renderer.render(TOOL_ROW).text
    as_object = {**TOOL_ROW, "messages": [*TOOL_ROW["messages"][:1],
                                          {**TOOL_ROW["messages"][1], "tool_calls": [call({"q": "12"})]},
                                          *TOOL_ROW["messages"][2:]]}
    assert renderer.render(as_object).text == as_string


@pytest.mark.parametrize("family", FAMILIES)
def test_each_row_keeps_its_own_shapes_and_tools(renderers, family):
    renderer = renderers[family]
    number = {**TOOL_ROW, "messages": [TOOL_ROW["messages"][0],
                                       {"role": "assistant", "content": "x", "tool_calls": [call({"q": 12})]},
                                       *TOOL_ROW["messages"][2:]]}
    text_number = renderer.render(number).text
    text_string = renderer.render(TOOL_ROW).text
    assert text_number != text_string  # 12 and "12" stay as each row wrote them
    no_tools = renderer.render(PLAIN).text
    assert "Find an order" in text_string and "Find an order" not in no_tools and "lookup" not in no_tools


@pytest.mark.parametrize("family", ["llama3.2", "gemma4"])
def test_one_beginning_of_sequence_token(renderers, family):
    renderer = renderers[family]
    ids = renderer.render(PLAIN).input_ids
    assert ids[0] == renderer.tokenizer.bos_token_id
    assert ids.count(renderer.tokenizer.bos_token_id) == 1


@pytest.mark.parametrize("family", FAMILIES)
def test_chat_template_sha256_names_the_template_file(renderers, standin_dirs, family):
    template = (standin_dirs[family][0] / "chat_template.jinja").read_bytes()
    assert renderers[family].chat_template_sha256 == hashlib.sha256(template).hexdigest()


def test_explicit_mask_is_used_and_checked(renderers):
    renderer = renderers["smollm2"]
    length = len(renderer.render(PLAIN).input_ids)
    mask = [0] * (length - 2) + [1, 1]
    row = {**PLAIN, "mask": mask}
    assert renderer.render(row, LossPolicy(explicit_mask_column="mask")).loss_mask == mask
    assert renderer.render({**PLAIN, "mask": None}, LossPolicy(explicit_mask_column="mask")).trained_tokens > 0
    cases = [([0, 2] + [0] * (length - 2), "integer 0 and 1"), ([0, 1], f"renders to {length} tokens"),
             ([1] + [0] * (length - 1), "selects the first token"), ([0] * length, "selects no token"),
             ([], "non-empty list"), ([0.0] * length, "integer 0 and 1")]
    for bad, words in cases:
        with pytest.raises(RenderError) as refused:
            renderer.render({**PLAIN, "mask": bad}, LossPolicy(explicit_mask_column="mask"))
        assert words in str(refused.value) and "remove loss.explicitLossMaskColumn" in str(refused.value)


def test_template_check_finds_text_dropped_beside_calls(renderers):
    findings = check_row_template(renderers["llama3.2"], TOOL_ROW)
    assert [str(f) for f in findings] == ["message 1: the chat template renders the message without its text"]
    assert check_row_template(renderers["qwen2.5"], TOOL_ROW) == []


def test_template_check_finds_an_answer_rendered_without_its_text(standin_dirs):
    from optimize.chat.render import ChatRenderer

    renderer = ChatRenderer.from_pretrained(str(standin_dirs["smollm2"][0]))
    # A template that, like some shipped ones, drops an assistant's text whenever it calls tools.
    renderer.tokenizer.chat_template = renderer.tokenizer.chat_template.replace(
        "{%- if message.content -%}{{- message.content -}}{%- endif -%}",
        "{%- if message.content and not message.tool_calls -%}{{- message.content -}}{%- endif -%}")
    row = {"messages": [{"role": "user", "content": "Find 12."},
                        {"role": "assistant", "content": "On it.", "tool_calls": [call({"q": "12"})]}], "tools": TOOLS}
    assert [str(f) for f in check_row_template(renderer, row)] == [
        "message 1: the chat template renders the answer without its text"]


def test_template_refusal_is_a_finding_not_a_crash(renderers):
    two_calls = {"messages": [{"role": "user", "content": "Two lookups."},
                              {"role": "assistant", "tool_calls": [call({"q": "1"}), call({"q": "2"}, "c2")]}],
                 "tools": TOOLS}
    findings = check_row_template(renderers["llama3.2"], two_calls)
    assert findings and findings[0].message is None and "the chat template refuses the row" in findings[0].reason


def test_llama_per_message_rule_names_system_with_tools():
    from optimize.chat.families import per_message_refusal

    row = {"messages": [{"role": "system", "content": "s"}, *TOOL_ROW["messages"]], "tools": TOOLS}
    assert "cannot render the system message on its own with tools" in per_message_refusal("llama3.2", row)
    assert per_message_refusal("llama3.2", TOOL_ROW) is None  # no system message
    assert per_message_refusal("llama3.2", {**row, "tools": []}) is None  # offers no tools
    assert per_message_refusal("qwen2.5", row) is None


def test_gemma4_corrected_template_renders_text_before_calls(standin_dirs):
    from optimize.chat.render import ChatRenderer

    path = str(standin_dirs["gemma4"][0])
    shipped = ChatRenderer.from_pretrained(path)
    corrected = ChatRenderer.from_pretrained(path, corrected_family="gemma4")
    assert corrected.chat_template_sha256 != shipped.chat_template_sha256
    shipped_text, corrected_text = shipped.render(TOOL_ROW).text, corrected.render(TOOL_ROW).text
    assert shipped_text.index("<|tool_call>") < shipped_text.index("Checking.")
    assert corrected_text.index("Checking.") < corrected_text.index("<|tool_call>")
    trained = trained_text(corrected, corrected.render(TOOL_ROW, LossPolicy("all")))
    assert trained.index("Checking.") < trained.index("lookup") and "It shipped." in trained
    assert check_row_template(corrected, TOOL_ROW) == []
    plain = PLAIN
    assert corrected.render(plain).text == shipped.render(plain).text  # rows without calls are unchanged


def test_unknown_template_is_not_corrected():
    from optimize.chat.corrections import corrected_template

    with pytest.raises(RenderError, match="not one Optimize knows how to correct"):
        corrected_template("gemma4", "{{ messages }}")
    with pytest.raises(RenderError, match="no corrected chat template for the qwen2.5 family"):
        corrected_template("qwen2.5", "{{ messages }}")


WEIGHTED = {"messages": [{"role": "user", "content": "One?"},
                         {"role": "assistant", "content": "First answer.", "weight": 1},
                         {"role": "user", "content": "Two?"},
                         {"role": "assistant", "content": "Second answer.", "weight": 0}]}


@pytest.mark.parametrize("family", FAMILIES)
def test_a_weight_0_answer_trains_nothing_and_a_weight_1_turn_trains_under_any_policy(renderers, family):
    renderer = renderers[family]
    for policy in (LossPolicy(), LossPolicy(assistant_turns="all")):
        rendered = renderer.render(WEIGHTED, policy)
        text = trained_text(renderer, rendered)
        assert text.startswith("First answer." + STOP[family])
        assert "Second answer." not in text
        assert_mask_matches_spans(rendered)
    # the weight is the loss policy's, never the template's: the text is the unweighted row's
    unweighted = {"messages": [{k: v for k, v in m.items() if k != "weight"} for m in WEIGHTED["messages"]]}
    assert renderer.render(WEIGHTED).text == renderer.render(unweighted).text


def test_a_row_whose_only_trained_answer_has_weight_0_is_refused_naming_the_fix(renderers):
    row = {"messages": [{"role": "user", "content": "One?"}, {"role": "assistant", "content": "A."},
                        {"role": "user", "content": "Two?"}, {"role": "assistant", "content": "B.", "weight": 0}]}
    with pytest.raises(RenderError, match="weight 0.*assistantTurns: all"):
        renderers["qwen2.5"].render(row)
    text = trained_text(renderers["qwen2.5"], renderers["qwen2.5"].render(row, LossPolicy(assistant_turns="all")))
    assert "A." in text and "B." not in text
