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


def http_pids(port, node_pid):
    """A node's HTTP processes: those of its processes holding its listening socket."""
    listening = next(inode for _, state, _, inode in tcp_sockets(port) if state == "0A")
    found = []
    for pid in descendants(node_pid):
        try:
            fds = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
        except OSError:
            continue
        if f"socket:[{listening}]" in fds:
            found.append(pid)
    assert found
    return found


def kb(pid, key):
    """A line of /proc/PID/status in kB (VmRSS, VmHWM...)."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))


def reset_peak(pid):
    """Set the process's VmHWM to its VmRSS now (Linux: clear_refs 5); whether it could."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class Memory:
    """Processes' RSS before, their peak since (VmHWM, reset at the start), and what
    they keep."""

    def __init__(self, pids):
        self.pids = pids
        for pid in self.pids:
            assert reset_peak(pid), f"cannot reset the peak memory of process {pid}"
        self.before = {pid: kb(pid, "VmRSS") / 1024 for pid in self.pids}

    def peak_growth(self):
        """MB: the largest growth of one process's peak over its RSS before."""
        return max(kb(pid, "VmHWM") / 1024 - self.before[pid] for pid in self.pids)

    def kept(self):
        return max(kb(pid, "VmRSS") / 1024 - self.before[pid] for pid in self.pids)
