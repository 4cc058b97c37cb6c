"""TensorFlow's C++ log level (harness/core/backend.py): harness's default, which drops the start-up
lines while TensorFlow loads, is told apart from a level the user chose, in the process that set
it and in every process that inherits its environment (a group's process, a Ray worker)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

KEYS = ("TF_CPP_MIN_LOG_LEVEL", "HARNESS_TF_LOG_LEVEL_DEFAULTED")
PROBE = (
    "import json, harness.core.backend as b; "
    "print(json.dumps({'user': b._USER_LOG_LEVEL, 'passed_on': {k: b.user_environment().get(k) for k in %r}}))" % (KEYS,)
)


def level_seen(env: dict[str, str]) -> dict:
    clean = {k: v for k, v in os.environ.items() if k not in KEYS}
    done = subprocess.run([sys.executable, "-c", PROBE], env={**clean, **env}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize(
    "env, user, passed_on",
    [
        ({}, False, {}),  # no level: harness's default, not passed on
        ({"TF_CPP_MIN_LOG_LEVEL": "0"}, True, {"TF_CPP_MIN_LOG_LEVEL": "0"}),  # the user's: kept
        # inherited from a harness process (a group's, a local Ray instance's worker): still harness's
        ({"TF_CPP_MIN_LOG_LEVEL": "2", "HARNESS_TF_LOG_LEVEL_DEFAULTED": "1"}, False, {}),
    ],
)
def test_a_log_level_harness_chose_is_not_passed_on_as_the_users(env, user, passed_on):
    seen = level_seen(env)
    assert seen["user"] is user
    assert {k: v for k, v in seen["passed_on"].items() if v is not None} == passed_on
