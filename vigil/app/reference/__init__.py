"""Reference pages generated from the code: the settings of every service and the migrated tables.

`python -m vigil.app.reference` writes them under docs/; tests/backbone/test_reference_docs.py fails when a
committed page differs from what the code generates now (a setting or a migration changed, the page did not).
"""
