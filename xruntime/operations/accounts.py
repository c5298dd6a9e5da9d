"""Who is calling (docs/protocol.md §10): an ``Authorization`` header → a ``Caller``.

With ``[auth] required = false`` (the default) every caller is ``ANONYMOUS``, who
sees every job, as before accounts existed.  Otherwise a caller sends HTTP Basic (a
user name and the token as password; the user name ``xtok`` goes with any user's
token, as PTV clients send it) or ``Bearer <token>``.  Only the tokens' sha256 are
configured; the presented token's sha256 is compared with every user's in constant
time, so neither the answer's time nor its text tells which part was wrong.
"""

import base64
import binascii
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..settings.config import ANY_USER

if TYPE_CHECKING:
    from ..settings.model import Settings


@dataclass(frozen=True)
class Caller:
    name: str  # the owner written on the jobs this caller starts
    admin: bool = False  # sees and manages every user's jobs

    def sees(self, owner: str) -> bool:
        """Whether a job of ``owner`` exists for this caller."""
        return self.admin or owner == self.name


#: The caller when accounts are off: every job is theirs to see.
ANONYMOUS = Caller("", admin=True)


class NotAuthenticated(Exception):
    """Missing or wrong credentials; ``str()`` is safe to show (it never holds them)."""


def authenticate(authorization: str | None, settings: "Settings") -> Caller:
    """The caller named by an ``Authorization`` header under ``settings``."""
    if not settings.auth.required:
        return ANONYMOUS
    name, token = _credentials(authorization)
    digest = token_sha256(token)
    found = None
    for user in settings.users.values():  # every user, matched or not: the same time
        if hmac.compare_digest(user.token_sha256, digest) and name in (None, ANY_USER, user.name):
            found = user
    if found is None:
        raise NotAuthenticated("the credentials are not valid")
    return Caller(found.name, found.admin)


def _credentials(authorization: str | None) -> tuple[str | None, str]:
    """(user name or None, token) of a Basic or Bearer header."""
    if not authorization or not authorization.strip():
        raise NotAuthenticated(
            "this server needs credentials: HTTP Basic (your user name and "
            "token) or an Authorization: Bearer token"
        )
    scheme, _, value = authorization.strip().partition(" ")
    value = value.strip()
    if scheme.lower() == "bearer" and value:
        return None, value
    if scheme.lower() == "basic" and value:
        try:
            name, colon, token = (
                base64.b64decode(value, validate=True).decode("utf-8").partition(":")
            )
        except (binascii.Error, UnicodeDecodeError) as exc:
            raise NotAuthenticated("the Basic credentials are not base64 of user:token") from exc
        if colon and token:
            return name, token
    raise NotAuthenticated(
        "the credentials are not valid: send HTTP Basic (user name and token) or Bearer"
    )


def token_sha256(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    """A fresh token: 256 random bits, URL-safe text that never begins with ``-``, so
    that ``--token TOKEN`` on a command line is not taken for an option."""
    while (token := secrets.token_urlsafe(32)).startswith("-"):
        pass
    return token
