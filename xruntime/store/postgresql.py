"""How a node reaches PostgreSQL when its URL does not say otherwise (docs/protocol.md §15).

A database the node cannot reach (a network cut, a host down) must be a
``StoreUnavailable`` within seconds, so that the node says so and answers
``TemporarilyUnavailableFault``, instead of hanging in TCP retransmission for minutes.
The store's engine and the
change feed's LISTEN/NOTIFY connections (``channel``) use the same settings.
"""

from collections.abc import Mapping

#: libpq's connection parameters, as a URL's query would give them.
POSTGRESQL_CONNECT = {
    "connect_timeout": "5",  # s, to open a connection
    "keepalives": "1",
    "keepalives_idle": "5",
    "keepalives_interval": "2",
    "keepalives_count": "3",
    "tcp_user_timeout": "10000",  # ms: sent data unacknowledged this long drops the connection
    "options": "-c statement_timeout=60000",  # ms: no statement of the store runs longer
}
#: How long a call waits for one of the pool's connections (s).
POOL_TIMEOUT_S = 10


def postgresql_connect_args(query: Mapping[str, object]) -> dict[str, str]:
    """POSTGRESQL_CONNECT, less what the URL's own query sets."""
    return {key: value for key, value in POSTGRESQL_CONNECT.items() if key not in query}
