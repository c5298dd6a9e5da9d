"""How a callback is signed (docs/protocol.md §14): Standard Webhooks' scheme, by the
``standardwebhooks`` package, the one receivers verify with (docs/callbacks.md).

``webhook-signature: v1,<base64 of HMAC-SHA256 over "id.timestamp.body">``, keyed with
the bytes of the owner's ``whsec_<base64>`` secret (the settings accept only such a
secret, of 24 to 64 bytes: ``settings.values``).  The package signs a ``str``: the body,
UTF-8 JSON, is decoded for it and encoded again, the very bytes POSTed.
"""

from datetime import UTC, datetime
from functools import lru_cache

from standardwebhooks.webhooks import Webhook


@lru_cache(maxsize=64)
def _signer(secret: str) -> Webhook:
    """The signer of a ``whsec_<base64>`` secret (its key decoded once)."""
    return Webhook(secret)


def signature(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header of ``body``: ``v1,<base64 HMAC-SHA256>``, sent
    with ``webhook-id: message_id`` and ``webhook-timestamp: timestamp`` (s)."""
    when = datetime.fromtimestamp(timestamp, tz=UTC)
    return _signer(secret).sign(message_id, when, body.decode("utf-8"))
