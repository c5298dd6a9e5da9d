"""xruntime: long operations as asynchronous jobs behind the xServer job protocol."""

from .support import spyne_compat

spyne_compat.apply()  # before anything imports spyne (Python 3.12+)

__version__ = "1.0.0"
