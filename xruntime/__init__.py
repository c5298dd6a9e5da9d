"""xruntime: long operations as asynchronous jobs behind the xServer job protocol."""
__version__ = "0.1.0"
