"""A testing kit for service authors: a real node with your service, and clients."""
