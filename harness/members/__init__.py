"""Members of the fused step: what each one builds and computes (the base member, the GAN and
autoencoder kinds, users' kinds), the registry that resolves kinds, and the model zoo.

The public names for writing a kind: `Member`, `Batch`, `StepOutput`, `Update`, `gradients`.
They load on first use, so the config can read the model catalogue without TensorFlow."""

__all__ = ["Batch", "Member", "StepOutput", "Update", "gradients"]


def __getattr__(name):
    if name in __all__:
        from harness.members import base

        return getattr(base, name)
    raise AttributeError(f"module 'harness.members' has no attribute {name!r}")
