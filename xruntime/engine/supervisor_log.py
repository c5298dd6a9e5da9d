"""The log of the node's job running, shared by the supervisor's modules.

One logger, named ``xruntime.supervisor`` as operators know it (docs/operations.md),
whichever module of the engine writes the line; and one throttle for the lines a
store outage causes, so that every slot failing at once still writes a line every
few seconds, not one each.
"""

import logging

from ..support.logs import OncePerPeriod

log = logging.getLogger("xruntime.supervisor")
outage_log = OncePerPeriod(log, 5.0)
