"""The services xruntime serves: one package each, exposing a module-level ``service``."""
