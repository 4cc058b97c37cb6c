"""The ground floor every layer above data may import: the run directory's layout and files, writes
that are atomic, the folder lock, and the typed run record (run.json).

Nothing here trains or draws: outputs/, training/, scale/ and nights/ all read and write runs through
these pieces, so they sit below all of them.
"""

from harness.rundir.files import atomic_write_text, current_umask, is_disk_full, make_folder, read_csv, remove_path, replaced_whole, save_table_as, utc_now
from harness.rundir.layout import RESUME_OVERRIDABLE, RunDir, beside_runs, create_run_dir, differing_versions, discard_new_run_dir, given_once, make_experiment_folder, new_run_id, runs_held, runs_in, version_changes, versions
from harness.rundir.hardware import this_machine
from harness.rundir.lock import FolderLock, holder_of
from harness.rundir.record import MemberRecord, MemberStatus, RunRecord, RunStatus

__all__ = [
    "RESUME_OVERRIDABLE", "FolderLock", "MemberRecord", "MemberStatus", "RunDir", "RunRecord", "RunStatus", "atomic_write_text", "create_run_dir", "current_umask", "discard_new_run_dir",
    "beside_runs", "differing_versions", "given_once", "holder_of", "is_disk_full", "make_experiment_folder", "make_folder", "new_run_id", "read_csv", "remove_path", "replaced_whole", "runs_held", "runs_in", "save_table_as", "this_machine", "utc_now", "version_changes", "versions",
]
