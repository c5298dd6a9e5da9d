"""The administrator's file: its keys, defaults and checks."""
