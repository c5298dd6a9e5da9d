"""pytest fixtures for service authors (loaded by pytest through the ``pytest11`` entry point)."""
