"""HTTP serving of one HTTP process: the ASGI application and the guards in front of the
bindings."""
