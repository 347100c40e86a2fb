"""The one parser of registry references: `NS/NAME`, `NS/NAME:vN`, `NS/NAME:ALIAS`, `NS/NAME@sha256:HEX`.

API, CLI and services all call `parse_reference`; nothing else splits a reference by hand.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from optimize.core.errors import Invalid
from optimize.core.names import check_name, is_valid_name, is_version_shaped

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_GRAMMAR = "NS/NAME, NS/NAME:vN, NS/NAME:ALIAS or NS/NAME@sha256:HEX"


@dataclass(frozen=True, slots=True)
class Reference:
    """A parsed reference. Exactly one of version, alias, digest is set, or none (the newest version)."""

    namespace: str
    name: str
    version: int | None = None
    alias: str | None = None
    digest: str | None = None

    @property
    def artifact(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def selector(self) -> str:
        """The part after the artifact, as the API's version route takes it (`v3`, `prod`, `sha256:…`)."""
        if self.version is not None:
            return f"v{self.version}"
        if self.digest is not None:
            return self.digest
        return self.alias or "latest"

    def __str__(self) -> str:
        if self.digest is not None:
            return f"{self.artifact}@{self.digest}"
        if self.version is not None:
            return f"{self.artifact}:v{self.version}"
        if self.alias is not None:
            return f"{self.artifact}:{self.alias}"
        return self.artifact


def parse_selector(text: str) -> tuple[int | None, str | None, str | None]:
    """Parse what follows `:` or `@`: returns (version, alias, digest)."""
    lowered = text.strip().lower()
    if _DIGEST.fullmatch(lowered):
        return None, None, lowered
    if is_version_shaped(lowered):
        number = int(lowered[1:])
        if number < 1:
            raise Invalid(f"version {text!r} does not exist", hint="versions start at v1")
        return number, None, None
    if is_valid_name(lowered):
        return None, lowered, None
    raise Invalid(f"{text!r} is not a version (vN), an alias or a digest (sha256:HEX)")


def parse_reference(text: str) -> Reference:
    """Parse a reference, lowering uppercase; refuse anything outside the grammar."""
    raw = text.strip()
    if raw.count("/") != 1:
        raise Invalid(f"reference {text!r} is not of the form {_GRAMMAR}")
    namespace_part, rest = raw.split("/", 1)
    digest = None
    version = alias = None
    if "@" in rest:
        name_part, digest_part = rest.split("@", 1)
        if not _DIGEST.fullmatch(digest_part.lower()):
            raise Invalid(f"reference {text!r} has a malformed digest",
                          hint="write the digest as sha256: and 64 hex digits")
        digest = digest_part.lower()
    elif ":" in rest:
        name_part, selector = rest.split(":", 1)
        version, alias, digest = parse_selector(selector)
    else:
        name_part = rest
    namespace = check_name(namespace_part, "namespace")
    name = check_name(name_part, "name")
    return Reference(namespace, name, version, alias, digest)


def parse_alias_target(text: str) -> tuple[Reference, str]:
    """Split `NS/NAME:ALIAS` into the artifact and the alias as written (the registry judges the alias)."""
    artifact, separator, alias = text.strip().rpartition(":")
    if not separator or not alias or "@" in text:
        raise Invalid(f"{text!r} does not name an alias; write NS/NAME:ALIAS")
    reference = parse_reference(artifact)
    if reference.selector != "latest":
        raise Invalid(f"{text!r} does not name an alias; write NS/NAME:ALIAS")
    return reference, alias


# A model an OpenAI fine-tuning job produced is named as OpenAI names one, `ft:` before its registry reference
FINE_TUNED = "ft:"


def fine_tuned_name(reference: str) -> str:
    """The name OpenAI's clients know a registered model by (`ft:NS/NAME:vN`)."""
    return FINE_TUNED + reference


def is_fine_tuned(model: object) -> bool:
    return isinstance(model, str) and model.startswith(FINE_TUNED)


def without_fine_tuned(name: str) -> str:
    """The registry reference a model name spells, `ft:` or not."""
    return name.removeprefix(FINE_TUNED)
