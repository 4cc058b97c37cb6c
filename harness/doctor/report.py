"""Running the doctor's checks in order and saying what it found: one line per check, then what
failed. Exit 0 when everything the machine has works; 4 (resources) naming what failed."""

from __future__ import annotations

import sys

from harness.doctor.checks import Finding, determinism, devices, mixed_float16, optional_parts, versions, xla
from harness.doctor.placements import run_trials, trials_for
from harness.errors import EXIT_OK, EXIT_RESOURCES


def run_doctor(placements: bool = True, out=None) -> int:
    out = out or sys.stdout
    from harness.core.backend import import_keras, import_tf

    tf, keras = import_tf(), import_keras()
    gpus = len(tf.config.list_physical_devices("GPU"))
    targets = ["/cpu:0", *(f"/gpu:{i}" for i in range(gpus))]
    found = versions(tf) + devices(tf) + optional_parts()
    for device in targets:
        found += [xla(tf, device), mixed_float16(tf, keras, device), determinism(tf, device)]
    for finding in found:
        _print(finding, out)
    if placements:
        for finding in run_trials(trials_for(gpus), say=lambda text: print(text, file=sys.stderr, flush=True)):
            _print(finding, out)
            found.append(finding)
    failed = [f for f in found if f.failed]
    if failed:
        print(f"\nharness doctor: {len(failed)} check(s) failed: {'; '.join(f.name for f in failed)}", file=out)
        return EXIT_RESOURCES
    print(f"\nharness doctor: everything this machine has works ({sum(f.status == 'ok' for f in found)} checks passed)", file=out)
    return EXIT_OK


def _print(finding: Finding, out) -> None:
    print(f"{finding.status:<7} {finding.name:<40} {finding.detail}", file=out, flush=True)
