"""Selects legacy Keras (tf_keras) and TensorFlow's BFC allocator for the CPU before TensorFlow is
first imported.

TensorFlow 2.21 ships Keras 3 as `tf.keras`; segmentation-models 1.0.1 and tf_keras optimizers need
Keras 2. The switch is an environment variable read once, at TensorFlow's first import, so it must
be set before anything imports TensorFlow. Every module of harness that needs TensorFlow imports it
through `import_tf()`, which makes the order impossible to get wrong inside the package.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Mapping

from harness.core.host import memory_bytes
from harness.errors import ConfigError

_REQUIRED_ENV = {"TF_USE_LEGACY_KERAS": "1", "SM_FRAMEWORK": "tf.keras"}
# TensorFlow's C++ start-up lines (oneDNN notice, CUDA probing, "failed call to cuInit" on machines
# without a GPU) are written to stderr before any log level applies, and bury harness's own
# messages. Unless the user chose a level, they are dropped while TensorFlow loads; failures still
# surface as Python exceptions. Set TF_CPP_MIN_LOG_LEVEL=0 to see everything.
# harness's own default is marked as such, so that a process that inherits it (a group's process,
# the workers of a Ray instance this process started) does not take it for the user's choice and
# print the start-up lines it exists to drop.
_DEFAULTED = "HARNESS_TF_LOG_LEVEL_DEFAULTED"
_USER_LOG_LEVEL = "TF_CPP_MIN_LOG_LEVEL" in os.environ and _DEFAULTED not in os.environ
if not _USER_LOG_LEVEL:
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    os.environ[_DEFAULTED] = "1"

# TensorFlow's plain CPU allocator keeps no statistics. On a CPU where oneDNN's allocator is not in
# use (TensorFlow turns oneDNN on by default only for CPUs with AVX-512's neural-network
# instructions or AMX; on an AMD EPYC with AVX2 it was off) `get_memory_info` raises, and the
# serving probe's peak could only read the process's resident set, which read 0.0 MB for a
# convolution whose output at the serving batch is 4 MB (freed memory is reused). The BFC allocator
# keeps them on every CPU. TensorFlow reads the choice once, when it makes its CPU allocator (at its
# first tensor or device query), so it is made here, when harness is imported; a value the user set
# is kept, as is a cap they set. TensorFlow caps the BFC allocator at 64 GB: on a machine with more,
# the cap is the machine's memory, so that harness never runs out of memory sooner than TensorFlow's
# own choice would.
CPU_ALLOCATOR, BFC_CAP, BFC_DEFAULT_CAP_MB = "TF_CPU_ALLOCATOR_USE_BFC", "TF_CPU_BFC_MEM_LIMIT_IN_MB", 1 << 16


def cpu_allocator_choice(environ: Mapping[str, str], memory_mb: int | None) -> dict[str, str]:
    """The variables to add to `environ` (none the user set) for the BFC allocator and its cap."""
    chosen = {} if CPU_ALLOCATOR in environ else {CPU_ALLOCATOR: "true"}
    if BFC_CAP not in environ and memory_mb is not None and memory_mb > BFC_DEFAULT_CAP_MB:
        chosen[BFC_CAP] = str(memory_mb)
    return chosen


def _machine_memory_mb() -> int | None:
    memory = memory_bytes()
    return None if memory is None else memory[0] // 2**20


os.environ.update(cpu_allocator_choice(os.environ, _machine_memory_mb()))


def select_legacy_keras() -> None:
    """Set the environment so the first TensorFlow import picks tf_keras.

    If TensorFlow is already imported with Keras 3 (a notebook that imported it first), setting the
    variables now changes nothing; say what to do instead of failing later with obscure errors.
    """
    already_imported = "tensorflow" in sys.modules
    wrong = {k: os.environ.get(k) for k, v in _REQUIRED_ENV.items() if os.environ.get(k) != v}
    if already_imported and wrong:
        tf = sys.modules["tensorflow"]
        keras_module = type(getattr(tf, "keras", None)).__module__ if hasattr(tf, "keras") else ""
        if not _uses_legacy_keras(tf):
            raise ConfigError(
                "TensorFlow was imported with Keras 3 before harness could select tf_keras "
                f"(found {keras_module or 'keras 3'}). Import harness before tensorflow, or set "
                "TF_USE_LEGACY_KERAS=1 and SM_FRAMEWORK=tf.keras in the environment before "
                "starting Python (restart the notebook kernel)."
            )
    for key, value in _REQUIRED_ENV.items():
        os.environ[key] = value


def user_environment() -> dict[str, str]:
    """The environment as the user gave it, for child processes (each makes its own choices), with
    the folders this process imports code from (`code_path`)."""
    env = {**os.environ, **code_path()}
    if not _USER_LOG_LEVEL:
        env.pop("TF_CPP_MIN_LOG_LEVEL", None)
        env.pop(_DEFAULTED, None)
    return env


def code_path() -> dict[str, str]:
    """PYTHONPATH for a child process that imports the code a config names (a group's process, a
    plan's probe): the folders this process imports from that a new interpreter would not find by
    itself (a script's own folder, `python -m`'s current folder, a notebook's sys.path additions),
    in this process's order, the user's PYTHONPATH among them. A plan asked for by a script run from
    another folder failed in its probe process with "No module named 'mymodels'", the module beside
    the script that the script itself had imported."""
    installed = [os.path.normpath(p) for p in {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}]
    folders = dict.fromkeys(os.path.abspath(p or os.getcwd()) for p in sys.path)  # '' is the current folder
    own = [f for f in folders if os.path.isdir(f) and not any(f == i or f.startswith(i + os.sep) for i in installed)]
    return {"PYTHONPATH": os.pathsep.join(own)} if own else {}


def _uses_legacy_keras(tf) -> bool:
    try:
        version = tf.keras.__version__
    except Exception:  # an incomplete keras import: treat as not legacy
        return False
    return str(version).startswith("2.")


def import_tf():
    """Return the `tensorflow` module, imported with tf_keras selected."""
    select_legacy_keras()
    if "tensorflow" in sys.modules or _USER_LOG_LEVEL:
        import tensorflow as tf

        return tf
    with stderr_silenced():
        import tensorflow as tf

        # CUDA probing happens here; physical listing leaves logical devices configurable.
        tf.config.list_physical_devices()
    return tf


@contextlib.contextmanager
def stderr_silenced():
    """Point file descriptor 2 at /dev/null (C++ writes there directly), then restore it. Only
    around code that prints nothing of harness's own: its messages would go too."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
        devnull = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        yield
        return
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def onednn_enabled() -> bool | None:
    """Whether TensorFlow's CPU kernels are oneDNN's in this process: TensorFlow's own choice for
    the CPU (on by default only with AVX-512's neural-network instructions or AMX), or the user's
    TF_ENABLE_ONEDNN_OPTS. A fast run's timings and last digits change with it. None where this
    TensorFlow does not say (the answer is in a module of TensorFlow's own, not its API)."""
    import_tf()
    try:
        from tensorflow.python.util import _pywrap_util_port

        return bool(_pywrap_util_port.IsMklEnabled())
    except (ImportError, AttributeError):
        return None


def import_keras():
    """Return `tf_keras`, the Keras 2 package segmentation-models and harness build on."""
    import_tf()
    import tf_keras

    return tf_keras
