"""Live reload of the administrator's file (docs/protocol.md §5, §8).

A thread looks at the file every half second (and at once on SIGHUP).  A valid edit
replaces the settings in force as a whole, within 2 s; an empty or vanished file
changes nothing (logged); keys that need a restart (host,
port, database, worker and thread counts) keep their running values and are logged as
such; an invalid edit is logged with its errors, line by line, and changes nothing.
"""

from __future__ import annotations

import logging
import os
import threading
import tomllib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

from ..author.registry import setting_keys
from ..settings import config
from ..support.logs import set_level

log = logging.getLogger(__name__)

CHECK_PERIOD = 0.5


class ConfigReloader(threading.Thread):
    """The thread that applies the edits of the file at ``path`` to the node's settings
    (``settings`` answers those in force, ``replace_settings`` swaps them: the node's
    own); each of ``listeners`` is then called with the new settings."""

    def __init__(
        self,
        settings: Callable[[], config.Settings],
        replace_settings: Callable[[config.Settings], None],
        path: str,
        known_services: Sequence[str],
        listeners: Iterable[Callable[[config.Settings], None]] = (),
    ) -> None:
        super().__init__(name="config-reloader", daemon=True)
        self.settings = settings
        self.replace_settings = replace_settings
        self.path = path
        self.known_services = known_services
        self.listeners = list(listeners)  # called with the new settings after a reload
        self.wake = threading.Event()
        self.stopped = False
        self._seen = self._stamp()

    def _stamp(self) -> tuple[int, int, int] | None:
        """What tells an edit of the file: its modification time, size and inode."""
        try:
            st = os.stat(self.path)
            return (st.st_mtime_ns, st.st_size, st.st_ino)
        except OSError:
            return None

    def run(self) -> None:
        while not self.stopped:
            forced = self.wake.wait(CHECK_PERIOD)
            self.wake.clear()
            stamp = self._stamp()
            if forced or (stamp != self._seen and stamp is not None):
                self._seen = stamp
                self.reload()

    def reload(self) -> bool:
        """Apply the file as it is now; False (and nothing changed) when it is invalid,
        empty or gone: an editor that truncates before it writes shows an empty file
        for a moment, and that is no request for every default."""
        old = self.settings()
        try:
            with open(self.path, "rb") as f:
                empty = _holds_no_setting(f.read())
        except OSError as exc:
            log.warning(
                "%s: cannot be read (%s); the settings in force stay",
                self.path,
                exc.strerror or exc,
            )
            return False
        if empty:
            log.warning("%s: the file is empty; the settings in force stay", self.path)
            return False
        try:
            new = config.load(
                self.path, known_services=self.known_services, service_keys=setting_keys()
            )
        except config.ConfigError as exc:
            for line in exc.errors:
                log.error("%s: %s", self.path, line)
            log.error("%s: the edit is not applied; the previous settings stay in force", self.path)
            return False
        kept = {
            key: getattr(old, key)
            for key in config.RESTART_KEYS
            if getattr(new, key) != getattr(old, key)
        }
        for key, value in kept.items():
            log.warning(
                "%s: %s changed to %r; it takes effect at the next restart (running with %r)",
                self.path,
                key,
                getattr(new, key),
                value,
            )
        # flags given on the command line (host, port) are restart keys: they stay as well
        new = replace(new, **{key: getattr(old, key) for key in config.RESTART_KEYS})
        if new == old:
            log.info("%s: re-read; nothing that applies live has changed", self.path)
            return True
        self.replace_settings(new)
        set_level(new.log_level, "main process")  # first: its line and the next obey it
        log.info("%s: reloaded; %s", self.path, ", ".join(_changes(old, new)) or "no change")
        for listener in self.listeners:
            listener(new)
        return True


def _holds_no_setting(text: bytes) -> bool:
    """Whether the file says nothing: empty, blank, or comments alone."""
    try:
        return not tomllib.loads(text.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return False  # invalid: config.load names its lines


def _changes(old: config.Settings, new: config.Settings) -> list[str]:
    return [
        f"{field} changed"
        for field in config.LIVE_FIELDS
        if getattr(old, field) != getattr(new, field)
    ]
