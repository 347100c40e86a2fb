"""API tokens: their form, their digest (the only thing stored) and the roles they carry.

A token is `opt_` and 40 hex digits; the server keeps its sha256 only, so a stolen database names no token. Roles
are ordered: a `reader` reads, a `trainer` also starts and changes work and data, an `admin` also manages tokens
and the deployment's models.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from enum import StrEnum

PREFIX = "opt_"
TOKEN = re.compile(r"^opt_[0-9a-f]{40}$")


class Role(StrEnum):
    READER = "reader"
    TRAINER = "trainer"
    ADMIN = "admin"

    def allows(self, needed: Role) -> bool:
        return _RANK[self] >= _RANK[needed]


_RANK = {Role.READER: 0, Role.TRAINER: 1, Role.ADMIN: 2}


def new_token() -> str:
    return PREFIX + secrets.token_hex(20)


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def well_formed(token: str) -> bool:
    return bool(TOKEN.match(token))


def same_digest(a: str, b: str) -> bool:
    return hmac.compare_digest(a, b)
