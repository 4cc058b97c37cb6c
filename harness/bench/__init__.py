"""`harness bench`: side-by-side measurements for the README (never timed assertions in tests)."""
