"""Runs across nights: `harness nightly` (tonight's run), the SQLite history, regression verdicts."""
