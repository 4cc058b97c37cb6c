"""The compiled step and what it runs on: the TensorFlow backend, losses, the fused train loop,
evaluation, and where members are placed (devices, strategies, precision, determinism)."""
