"""Option values written as comma-separated lists (``--acceptance 0.6,0.75``, ``--batch-sizes 1,2,4``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TypeVar

Item = TypeVar("Item", int, float)


def comma_list(convert: Callable[[str], Item], expected: str) -> Callable[[str], list[Item]]:
    """An argparse ``type=``: ``"a,b,c" ↦ [convert(a), convert(b), convert(c)]``; a part that
    ``convert`` rejects fails as ``expected <expected>, got '<text>'``."""

    def parse(text: str) -> list[Item]:
        try:
            return [convert(part) for part in text.split(",")]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None

    return parse
