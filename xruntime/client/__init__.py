"""The client of the JSON binding (``Client``) and the command-line client built on it
(``commands``, ``view``).  It speaks HTTP only: nothing here imports the server."""

from .json_client import DEFAULT_URL, Client, Fault, Unreachable

__all__ = ["DEFAULT_URL", "Client", "Fault", "Unreachable"]
