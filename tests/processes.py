"""The processes a process started and the TCP sockets of a port, from /proc (no
dependencies: the benchmarks use it in their own environments too)."""

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


def tcp_sockets(port):
    """The loopback TCP sockets with ``port`` as their local port, from /proc/net/tcp
    and tcp6: (remote port, state, receive queue, inode) each; state "0A" is LISTEN,
    "01" ESTABLISHED, "08" CLOSE_WAIT."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or int(fields[1].rsplit(":", 1)[1], 16) != port:
                continue
            found.append(
                (
                    int(fields[2].rsplit(":", 1)[1], 16),
                    fields[3],
                    int(fields[4].split(":")[1], 16),
                    fields[9],
                )
            )
    return found
