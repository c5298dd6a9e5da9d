"""The log of the node's job running, shared by the supervisor's modules.

One logger, the engine's (``xruntime.engine``), whichever of its modules writes the
line: to an operator it is one actor, the node's job running (docs/operations.md);
and one throttle for the lines a
store outage causes, so that every slot failing at once still writes a line every
few seconds, not one each.
"""

import logging

from ..support.logs import OncePerPeriod

log = logging.getLogger(__package__)
outage_log = OncePerPeriod(log, 5.0)
