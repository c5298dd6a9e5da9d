"""The service author's API: a ``Service`` with long operations, child jobs, retries;
and the registry that finds every service.  A service module needs only this package,
``xruntime.protocol`` (types, faults) and ``xruntime.support``."""

from .service import *  # noqa: F403  (the names service.__all__ lists)
from .service import __all__  # noqa: F401
