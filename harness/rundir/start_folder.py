"""The folder a run was started from (run.json `started_in`): its config's relative data paths
(`data.images: data/skimage/images`) are read from there. A later command on the run asked from
another folder (`harness resume`, `report`, `export-batches`) read them from its own and said only
"folder 'data/skimage/images' does not exist (a relative path is read from the current folder,
/tmp)"; it is told where the run was started and to run it from there.

The paths are not rewritten: they are part of the config the run's checkpoints belong to (its
fingerprint), and a run's folder moved with its data keeps working from the new place.
"""

from __future__ import annotations

from pathlib import Path

from harness.config.data_spec import FILE_PATHS
from harness.config.schema import ExperimentConfig


def elsewhere_hint(config: ExperimentConfig, started_in: str | None) -> str | None:
    """What to do when the run's relative data paths exist from the folder it was started in and
    not from this one; None when they are found here, or nothing says where the run started."""
    if not started_in or Path(started_in).resolve() == Path.cwd().resolve():
        return None
    start = Path(started_in)
    paths = {key: getattr(config.data, key) for key in FILE_PATHS}
    found_there = [f"data.{key}: {path}" for key, path in paths.items()
                   if path is not None and not path.is_absolute() and not path.exists() and (start / path).exists()]
    if not found_there:
        return None
    return (f"the run's data paths are relative to the folder it was started in, {start}, and this command runs in "
            f"{Path.cwd()}, where they do not exist ({'; '.join(found_there)}): run it from there (cd {start})")
