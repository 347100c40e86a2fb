"""Name rules for namespaces, artifact names and aliases (reference.md §5.1).

Each name part is 1–64 characters of lowercase letters and digits separated by single `.`, `_` or `-`.
Uppercase is lowered before checking, so `Triage/Train` names `triage/train`.
"""

from __future__ import annotations

import re

from optimize.core.errors import Invalid

MAX_NAME_LENGTH = 64
_NAME = re.compile(r"[a-z0-9]+(?:[._-][a-z0-9]+)*")
_VERSION_SHAPED = re.compile(r"v[0-9]+")
RESERVED_ALIASES = frozenset({"latest"})


def is_valid_name(text: str) -> bool:
    return 0 < len(text) <= MAX_NAME_LENGTH and _NAME.fullmatch(text) is not None


def check_name(text: str, what: str) -> str:
    """Return the lowered name, or refuse it saying which rule it breaks."""
    lowered = text.lower()
    if not is_valid_name(lowered):
        raise Invalid(
            f"{what} {text!r} is not a valid name",
            hint="use 1 to 64 lowercase letters and digits, separated by single '.', '_' or '-'",
        )
    return lowered


def is_version_shaped(text: str) -> bool:
    return _VERSION_SHAPED.fullmatch(text) is not None


def check_alias(text: str) -> str:
    """An alias is a name that does not look like a version and is not registry-managed."""
    alias = check_name(text, "alias")
    if is_version_shaped(alias):
        raise Invalid(f"alias {alias!r} looks like a version", hint="choose an alias that is not shaped like vN")
    if alias in RESERVED_ALIASES:
        raise Invalid(
            f"alias {alias!r} is managed by the registry and always names the newest version",
            hint="choose another alias",
        )
    return alias
