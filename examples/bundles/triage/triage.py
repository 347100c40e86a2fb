"""The quickstart's scoring bundle: how well a support-ticket answer matches the row's expected triage.

`compute_score(prompt, completion, fields)` returns 1.0 for an answer whose JSON object has the expected category
and urgency, 0.5 for one of the two, 0.0 for neither or for an answer that is not a JSON object, and None (does
not apply) for a row whose expected answer is not a triage object ("Let me look up that order.").
"""

import json


def _triage(text):
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def compute_score(prompt, completion, fields):
    expected = _triage(fields.get("expected"))
    if expected is None:
        return None
    answer = _triage(completion.strip())
    if answer is None:
        return 0.0
    return sum(0.5 for key in ("category", "urgent") if key in expected and answer.get(key) == expected[key])
