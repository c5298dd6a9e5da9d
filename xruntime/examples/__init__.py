"""Example services, loaded with XRUNTIME_SERVICE_MODULES (not served by default)."""
