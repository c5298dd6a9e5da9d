"""The processes a process started, from /proc (no dependencies: the benchmarks use it
in their own environments too)."""
import os


def descendants(pid):
    """Every process started by ``pid``, and by those, and so on."""
    found, pending = [], [pid]
    while pending:
        children = _children(pending.pop())
        found.extend(children)
        pending.extend(children)
    return found


def _children(pid):
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found
