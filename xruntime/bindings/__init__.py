"""Bindings translate between a wire form and typed requests, responses and faults."""
