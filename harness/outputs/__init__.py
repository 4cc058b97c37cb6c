"""What a run shows: the rows writers (losses.csv, terminal, TensorBoard), tables, plots, the
report page, `harness compare` and the MLflow copy. Everything here reads files or rows only."""
