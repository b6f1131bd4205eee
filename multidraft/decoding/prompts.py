"""Prompt sets for measurement: a file, a ``datasets`` dataset, or the bundled set.

A :class:`PromptSet` is the prompts with one task tag each (``""`` when untagged); the tags
give the per-task rows of :meth:`multidraft.decoding.Results.by_task`. Three sources:

- a file (:func:`read_prompts`): JSON lines with a ``"prompt"`` field (and an optional
  ``"task"``), when the name ends in ``.jsonl`` or ``.json``; otherwise plain text, one prompt
  a line (blank lines skipped);
- a dataset (:func:`dataset_prompts`): ``NAME[:SPLIT[:FIELD]]`` through the ``datasets``
  library (the ``datasets`` extra, imported only here), NAME a hub id or a directory written by
  ``save_to_disk``;
- the bundled set (:func:`bundled_prompts`, ``--prompts bundled``): 30 prompts written for this
  repository, six each of chat, code, math, translation and summarisation.

Every defect is refused with a one-line ``ValueError`` naming the source and the line or field.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

__all__ = ["PromptSet", "BUNDLED", "read_prompts", "dataset_prompts", "bundled_prompts", "resolve_prompts"]

#: The name that selects the bundled prompt set where a file is expected.
BUNDLED = "bundled"
#: Fields tried, in order, when a dataset spec names none.
DATASET_FIELDS = ("prompt", "text", "instruction", "question")
#: Environment variables under which the ``datasets`` library does not download.
OFFLINE_VARIABLES = ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")


@dataclass(frozen=True)
class PromptSet:
    """Prompts with one task tag each (``""``: untagged), in order; ``source`` says where they
    came from.

    >>> PromptSet(("Hi", "2 + 2?"), ("chat", "math")).task_names
    ('chat', 'math')
    """

    prompts: tuple[str, ...]
    tasks: tuple[str, ...]
    source: str = ""

    def __post_init__(self) -> None:
        if len(self.tasks) != len(self.prompts):
            raise ValueError(f"tasks: one task per prompt, got {len(self.tasks)} for {len(self.prompts)} prompts")

    @property
    def task_names(self) -> tuple[str, ...]:
        """The distinct task tags in order of first appearance."""
        return tuple(dict.fromkeys(self.tasks))

    def round_robin(self, count: int) -> PromptSet:
        """``count`` prompts taken in turn from each task (the first of every task, then the
        second, ...), in that order: a small sample that covers the tasks.

        >>> PromptSet(("a", "b", "c", "d"), ("x", "x", "y", "y")).round_robin(3).prompts
        ('a', 'c', 'b')
        """
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= len(self.prompts):
            raise ValueError(f"count: expected an integer in 1..{len(self.prompts)}, got {count!r}")
        queues = {task: [i for i, t in enumerate(self.tasks) if t == task] for task in self.task_names}
        order = [queue[row] for row in range(max(map(len, queues.values()))) for queue in queues.values() if row < len(queue)]
        chosen = order[:count]
        return PromptSet(tuple(self.prompts[i] for i in chosen), tuple(self.tasks[i] for i in chosen), self.source)

    def head(self, count: int | None) -> PromptSet:
        """The first ``count`` prompts (all when None)."""
        if count is None:
            return self
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"max_prompts: expected an integer >= 1, got {count!r}")
        return PromptSet(self.prompts[:count], self.tasks[:count], self.source)


def read_prompts(path: str | os.PathLike) -> PromptSet:
    """The prompts of a file: JSON lines (``.jsonl``/``.json``: one object a line with a
    non-empty string ``"prompt"`` and an optional string ``"task"``) or plain text (one prompt
    a line, blank lines skipped).

    Raises
    ------
    ValueError
        A missing or unreadable file, one with no prompt, a line that is not a JSON object, a
        missing or empty ``"prompt"``, a ``"task"`` that is not a string (each naming the line).
    """
    path = Path(path)
    name = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValueError(f"prompts: no such file: {name}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"prompts: cannot read {name} ({error})") from None
    lines = [(number, line) for number, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not lines:
        raise ValueError(f"prompts: {name} holds no prompt (the file is empty)")
    if path.suffix.lower() not in (".jsonl", ".json"):
        return PromptSet(tuple(line.strip() for _, line in lines), ("",) * len(lines), name)
    prompts, tasks = [], []
    for number, line in lines:
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"prompts: {name} line {number} is not JSON ({error.msg})") from None
        if not isinstance(row, dict):
            raise ValueError(f"prompts: {name} line {number}: expected a JSON object with a \"prompt\" field")
        prompt, task = row.get("prompt"), row.get("task", "")
        if not isinstance(prompt, str) or not prompt.strip():
            found = "no \"prompt\" field" if prompt is None else f"\"prompt\" is {prompt!r}"
            raise ValueError(f"prompts: {name} line {number}: {found}; every line needs a non-empty string \"prompt\"")
        if not isinstance(task, str):
            raise ValueError(f"prompts: {name} line {number}: \"task\" must be a string, got {task!r}")
        prompts.append(prompt)
        tasks.append(task)
    return PromptSet(tuple(prompts), tuple(tasks), name)


def bundled_prompts() -> PromptSet:
    """The 30 prompts bundled with multidraft (package data ``decoding/data/prompts.jsonl``),
    six each tagged chat, code, math, translation and summarisation.

    >>> bundled_prompts().task_names
    ('chat', 'code', 'math', 'translation', 'summarisation')
    """
    with resources.as_file(resources.files("multidraft.decoding") / "data" / "prompts.jsonl") as path:
        found = read_prompts(path)
    return PromptSet(found.prompts, found.tasks, BUNDLED)


def _offline() -> bool:
    return any(os.environ.get(name, "").lower() in {"1", "true", "yes", "on"} for name in OFFLINE_VARIABLES)


def dataset_prompts(spec: str) -> PromptSet:
    """The prompts of a dataset, ``NAME[:SPLIT[:FIELD]]``: NAME a hub id or a directory saved by
    ``datasets``' ``save_to_disk``; SPLIT (default ``train``; a saved single dataset has none);
    FIELD a string column (default the first of ``prompt``, ``text``, ``instruction``,
    ``question`` the dataset has). Untagged (task ``""``).

    A hub dataset needs the network: offline (``HF_DATASETS_OFFLINE``/``HF_HUB_OFFLINE`` set and
    the dataset not cached, or the hub unreachable) it fails at once, saying to pass a file with
    ``--prompts`` or a saved directory instead.

    Raises
    ------
    ImportError
        Without the ``datasets`` library (``pip install 'multidraft[datasets]'``).
    ValueError
        A malformed spec, an unknown split or field (naming the ones there are), an empty or
        non-string prompt, no rows, or a hub dataset that cannot be had offline.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"dataset: expected NAME[:SPLIT[:FIELD]], got {spec!r}")
    parts = spec.split(":")
    if len(parts) > 3 or not all(part.strip() for part in parts):
        raise ValueError(f"dataset: expected NAME[:SPLIT[:FIELD]] with non-empty parts, got {spec!r}")
    name, split, field = parts[0], parts[1] if len(parts) > 1 else None, parts[2] if len(parts) > 2 else None
    try:
        import datasets
    except ImportError:
        raise ImportError("dataset: the datasets library is needed: pip install 'multidraft[datasets]'") from None
    instead = "pass a local file with --prompts FILE (JSON lines or one prompt a line) or a directory saved by save_to_disk"
    if Path(name).expanduser().is_dir():
        loaded = datasets.load_from_disk(str(Path(name).expanduser()))
        splits = tuple(loaded.keys()) if isinstance(loaded, datasets.DatasetDict) else ()
        if splits:
            split = split or "train"
            if split not in splits:
                raise ValueError(f"dataset: {name!r} has no split {split!r}; its splits: {', '.join(splits)}")
            loaded = loaded[split]
        elif split is not None:
            raise ValueError(f"dataset: {name!r} is one saved dataset without splits; give {name} alone (no :{split})")
    else:
        from multidraft.decoding.models import _hub_reachable

        if not _offline() and not _hub_reachable():
            raise ValueError(f"dataset: {name!r} cannot be downloaded (the Hugging Face hub is unreachable); {instead}")
        split = split or "train"
        try:
            loaded = datasets.load_dataset(name, split=split)
        except ValueError as error:  # datasets' words for an unknown split name the known ones
            raise ValueError(f"dataset: {name!r}: {str(error).splitlines()[0]}") from None
        except (ConnectionError, FileNotFoundError, OSError) as error:
            why = "offline and not cached" if _offline() else str(error).splitlines()[0]
            raise ValueError(f"dataset: {name!r} cannot be loaded ({why}); {instead}") from None
    columns = tuple(loaded.column_names)
    if field is None:
        field = next((f for f in DATASET_FIELDS if f in columns), None)
        if field is None:
            raise ValueError(
                f"dataset: {name!r} has none of the fields {', '.join(DATASET_FIELDS)}; name one as "
                f"{name}:{split or 'SPLIT'}:FIELD (its fields: {', '.join(columns)})"
            )
    elif field not in columns:
        raise ValueError(f"dataset: {name!r} has no field {field!r}; its fields: {', '.join(columns)}")
    values = loaded[field]
    if len(values) == 0:
        raise ValueError(f"dataset: {spec!r} has no rows")
    for row, value in enumerate(values):
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"dataset: {spec!r} row {row}: field {field!r} must be a non-empty string, got {value!r}")
    return PromptSet(tuple(values), ("",) * len(values), spec)


def resolve_prompts(prompts: str | os.PathLike | None = None, dataset: str | None = None) -> PromptSet | None:
    """One :class:`PromptSet` from a file (or :data:`BUNDLED`) or a dataset spec; None when
    neither is given.

    Raises
    ------
    ValueError
        Both given, or the source's own errors.
    """
    if prompts is not None and dataset is not None:
        raise ValueError("prompts: give a prompt file or a dataset, not both")
    if dataset is not None:
        return dataset_prompts(dataset)
    if prompts is None:
        return None
    return bundled_prompts() if str(prompts) == BUNDLED else read_prompts(prompts)
