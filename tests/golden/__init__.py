"""Golden outputs of today's scripts (see cases.py; regenerate with freeze.py)."""
