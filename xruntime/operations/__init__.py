"""The operation layer: the job protocol's operations, watches, accounts and quotas,
shared by every binding."""
