"""Runs bigger than one fused step: the plan (what each model costs, which go together), groups in
processes of their own on every device or a Ray cluster, and their merge into one comparison."""
