"""The experiment config: the YAML schema, loading, `--set` overrides and their error messages.
Pure: validating a config imports no TensorFlow and none of the code a config names."""
