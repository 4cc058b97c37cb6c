"""The loss grammar: a loss is named in the config as a weighted sum of terms (`bce`, `dice`,
`bce+dice`, `bce + 0.5*dice`, `focal+dice`). Parsing it needs no TensorFlow, so a typo is refused
when the config is read; core/losses.py builds the terms."""

from __future__ import annotations

import re

from harness.errors import closest

TERMS = ("bce", "cce", "dice", "focal")
_TERM = re.compile(r"^\s*(?:(?P<weight>\d+(?:\.\d*)?(?:e-?\d+)?)\s*\*\s*)?(?P<name>[a-z]+)\s*$")


def parse_loss(text: str) -> list[tuple[float, str]]:
    """`"bce + 0.5*dice"` -> [(1.0, "bce"), (0.5, "dice")]; ValueError naming the bad term."""
    terms = []
    for part in text.split("+"):
        match = _TERM.match(part)
        if not match or match["name"] not in TERMS:
            close = closest(part.split("*")[-1].strip(), TERMS)
            raise ValueError(
                f"bad loss term {part.strip()!r} in {text!r}{f' (did you mean {close!r}?)' if close else ''}; terms are "
                f"{', '.join(TERMS)}, combined like 'bce+dice' or 'bce + 0.5*dice'"
            )
        terms.append((float(match["weight"] or 1.0), match["name"]))
    return terms
