"""Input data: the step-indexed pipeline shared by all members, augmentation, real sources, the
pre-flight scan and the disk cache."""
