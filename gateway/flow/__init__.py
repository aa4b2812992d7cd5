"""Flow control: a bounded gateway queue for requests no pool has room for (see queue.py)."""
