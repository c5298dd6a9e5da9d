"""Callbacks (docs/protocol.md §14): where a callback is checked, signed and sent.

- ``targets``: where a callback may go: the URL's spelling, ``[callbacks] allowed``, its
  host resolved and every address judged; ``check_callback`` at a start (called by
  ``operations.jobs``), ``target_of`` at each attempt.
- ``signing``: Standard Webhooks' ``webhook-signature``, by the ``standardwebhooks``
  package receivers verify with.
- ``sending``: one POST to the addresses checked, within one deadline for all its steps
  (``Connections``).
- ``delivery``: ``CallbackDelivery``, which takes due events from the outbox, caps the
  attempts per owner and per target, and writes their outcomes.
- ``process``: the node's callbacks process, which runs ``CallbackDelivery`` (started
  by ``serving.node``).

What fills and claims the outbox is SQL, and only the store speaks SQL
(docs/architecture.md), so it stays in ``store/``: ``store/callbacks.py`` (the triggers
that write a job's events into the outbox as it changes) and ``store/outbox.py`` (the
claims, leases and outcomes ``delivery`` calls through ``JobStore``).
"""
