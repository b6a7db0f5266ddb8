"""What the health controller and the burn-in both know about GPUs: the Xid/SXid catalog, kernel-log parsing and
the kinds of finding."""
