"""Reference pages generated from the code: the settings of every service, the migrated tables, the metrics.

`python -m vigil.app.reference` writes them under docs/ (and README.md's list of metric names);
tests/backbone/test_reference_docs.py fails when a committed page differs from what the code generates now
(a setting or a migration changed, the page did not), tests/metrics/test_rules.py when README.md's list does.
"""
