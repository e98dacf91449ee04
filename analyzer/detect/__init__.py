"""Detectors: SQL over the rollups at an event-time point, then pure judgement in Python.

Each module pairs one query (`query(ctx)`) with one pure function (`judge(...)`) that
turns rows into `Finding`s, so thresholds are unit-testable without a database.
"""
