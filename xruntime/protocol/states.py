"""The state table of docs/protocol.md §3 as data: what each operation does in each state.

The operation layer looks its decisions up here, and the unit tests check every cell,
so the table in the protocol and the code cannot drift apart silently.
"""

from enum import StrEnum


class Status(StrEnum):
    """A job's status (docs/protocol.md §3).  A ``StrEnum``: each member is its wire
    form, equal to it, and stored, logged and serialised as it."""

    QUEUING = "QUEUING"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    DELETED = "DELETED"
    UNKNOWN = "UNKNOWN"


QUEUING, RUNNING, STOPPING = Status.QUEUING, Status.RUNNING, Status.STOPPING
SUCCEEDED, FAILED, DELETED, UNKNOWN = (
    Status.SUCCEEDED,
    Status.FAILED,
    Status.DELETED,
    Status.UNKNOWN,
)

#: States a job is stored in (UNKNOWN is only ever an answer).
STORED_STATES = (QUEUING, RUNNING, STOPPING, SUCCEEDED, FAILED, DELETED)
ACTIVE = frozenset({QUEUING, RUNNING, STOPPING})
FINISHED = frozenset({SUCCEEDED, FAILED})
#: A watch answers at once in these states.
TERMINAL = frozenset({SUCCEEDED, FAILED, DELETED, UNKNOWN})

# Decisions.
REFUSE = "refuse with JobStateFault"
UNKNOWN_JOB = "refuse with UnknownJobFault"
ANSWER_RESULT = "answer the stored response"
RAISE_STORED_FAULT = "raise the job's own fault"
TO_STOPPING = "move to STOPPING and signal the operation"
UNCHANGED = "answer the job unchanged"
ERASE_NOW = "erase the record at once and answer DELETED"
TO_DELETED = "move to DELETED and abort the computation"

FETCH = {
    QUEUING: REFUSE,
    RUNNING: REFUSE,
    STOPPING: REFUSE,
    SUCCEEDED: ANSWER_RESULT,
    FAILED: RAISE_STORED_FAULT,
    DELETED: REFUSE,
    UNKNOWN: UNKNOWN_JOB,
}

STOP = {
    QUEUING: REFUSE,
    RUNNING: TO_STOPPING,
    STOPPING: UNCHANGED,
    SUCCEEDED: UNCHANGED,
    FAILED: UNCHANGED,
    DELETED: REFUSE,
    UNKNOWN: UNKNOWN_JOB,
}

DELETE = {
    QUEUING: ERASE_NOW,
    RUNNING: TO_DELETED,
    STOPPING: TO_DELETED,
    SUCCEEDED: ERASE_NOW,
    FAILED: ERASE_NOW,
    DELETED: UNCHANGED,
    UNKNOWN: UNCHANGED,
}

#: Whether a job in this state shows its progress.
SHOWS_PROGRESS = {
    QUEUING: False,
    RUNNING: True,
    STOPPING: True,
    SUCCEEDED: True,
    FAILED: True,
    DELETED: False,
    UNKNOWN: False,
}
