"""One run, start to end: the runner that sets it up in order, the controller's outer loop, the
end-of-run actions, checkpoints, the run directory and its lock, probes, exports, local workers."""
