"""Captured model calls, our own JSONL: one record per line,

    {"id": "call-1", "messages": [...], "tools": [...], "provenance": {"complete": true, ...}}

`id` is the record's own name (unique in the file), `messages` a conversation as a chat dataset row holds it (its
last message the assistant's answer; tool calls answered by tool messages), `tools` the function definitions offered
(optional), and `provenance` where the call came from: `complete` is required — false marks a call captured only in
part (a stream cut off, a message dropped), which is skipped (`skipped["incomplete"]`) — and anything else it holds
(the model, the time, the service) is kept in the candidate's `meta`. Every complete record is a candidate.
Pure: lines in, candidates out.
"""

from __future__ import annotations

from optimize.sessions.candidates import Candidate, LineError, Parser, checked, json_line, json_type

KEYS = ("id", "messages", "tools", "provenance")
HOLDS = 'one captured call {"id", "messages": [...], "tools"?: [...], "provenance": {"complete": true|false}}'


class CanonicalParser(Parser):
    source = "canonical"
    records_are = "records"

    def __init__(self) -> None:
        super().__init__()
        self._ids: dict[str, int] = {}

    def line(self, number: int, text: str) -> list[Candidate]:
        record = json_line(number, text, HOLDS)
        if not isinstance(record, dict):
            raise LineError(number, f"holds {json_type(record)}, not a record", hint=f"each line holds {HOLDS}")
        unknown = sorted(set(record) - set(KEYS))
        if unknown:
            raise LineError(number, f"the record has {', '.join(map(repr, unknown))}, which a captured call does "
                                    "not hold", hint="a record holds id, messages, tools and provenance; put what "
                                                     "else you know under provenance")
        ident = record.get("id")
        if not isinstance(ident, str) or not ident.strip():
            raise LineError(number, "the record has no 'id' (a non-empty string)",
                            hint="name each record with an id unique in the file")
        if ident in self._ids:
            raise LineError(number, f"id {ident!r} is the id of the record on line {self._ids[ident]} too",
                            hint="give each record an id of its own")
        self._ids[ident] = number
        provenance = record.get("provenance")
        if not isinstance(provenance, dict) or not isinstance(provenance.get("complete"), bool):
            raise LineError(number, f"record {ident!r} has no provenance.complete (true or false)",
                            hint='say whether the call was captured whole: "provenance": {"complete": true}')
        self.records += 1
        if not provenance["complete"]:
            self.skipped["incomplete"] += 1
            return []
        candidate = Candidate(id=ident, messages=record.get("messages"), tools=record.get("tools"),
                              meta={"provenance": provenance})
        return [checked(candidate, number, f"record {ident!r}")]
