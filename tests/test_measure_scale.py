"""Measuring at scale (issue 32): prompt files, datasets and the bundled tagged prompt set,
per-prompt seeds, per-task rows, runs sharded over torchrun processes equal to one process,
accelerate device maps, and a progress line per prompt when stderr is not a terminal.

Command-line cases run the installed console script (and ``torchrun``) in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sysconfig
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from conftest import console_script  # noqa: E402
from test_decoding import tiny_model  # noqa: E402
from test_decoding_models import tiny_dir  # noqa: E402, F401 -- the tiny model saved to a directory

from multidraft.decoding import DraftSpec, MeasureConfig, Sampling, load_model, measure  # noqa: E402
from multidraft.decoding.config import prompt_seeds  # noqa: E402
from multidraft.decoding.measurement import measure_shard, merge_shards, run_measurement  # noqa: E402
from multidraft.decoding.prompts import PromptSet, bundled_prompts, dataset_prompts, read_prompts, resolve_prompts  # noqa: E402
from multidraft.decoding.results import TIMING_FIELDS, VERIFIER_TIMING_FIELDS  # noqa: E402
from multidraft.decoding.sharding import check_world, shard_indices  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

TAGGED = [{"task": "chat", "prompt": "a b"}, {"task": "code", "prompt": "c d e"}, {"task": "chat", "prompt": "f a"}]


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def one_line_error(result, command: str = "measure") -> str:
    assert result.returncode == 2 and result.stdout == "", (result.stdout, result.stderr)
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith(f"multidraft {command}: error: ")
    return result.stderr


def run_script(argv, env=None, timeout=600):
    """A console script in a subprocess with extra environment variables."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})
    return done


def reproducible(summary: dict) -> dict:
    """A JSON summary without its wall-clock fields."""
    out = {key: value for key, value in summary.items() if key not in TIMING_FIELDS}
    out["verifiers"] = [{k: v for k, v in run.items() if k not in VERIFIER_TIMING_FIELDS} for run in summary["verifiers"]]
    return out


# ---------------------------------------------------------------------------------------------
# Prompt files, the bundled set, datasets


def test_read_prompts_jsonl_with_tasks_and_plain_text(tmp_path):
    found = read_prompts(write_jsonl(tmp_path / "p.jsonl", [*TAGGED, {"prompt": "b"}]))
    assert found.prompts == ("a b", "c d e", "f a", "b")
    assert found.tasks == ("chat", "code", "chat", "")
    assert found.task_names == ("chat", "code", "")
    text = tmp_path / "p.txt"
    text.write_text("first prompt\n\n  second prompt  \n", encoding="utf-8")
    assert read_prompts(text) == PromptSet(("first prompt", "second prompt"), ("", ""), str(text))


def test_bundled_prompts_cover_five_tasks_six_each():
    found = bundled_prompts()
    assert len(found.prompts) == 30 and len(set(found.prompts)) == 30
    assert found.task_names == ("chat", "code", "math", "translation", "summarisation")
    assert all(found.tasks.count(task) == 6 for task in found.task_names)
    assert resolve_prompts("bundled") == found


BAD_FILES = [
    ("missing", None, "no such file"),
    ("empty", "", "holds no prompt"),
    ("blank", "\n  \n", "holds no prompt"),
    ("not-json", '{"prompt": "a"}\n{"prompt": \n', "line 2 is not JSON"),
    ("not-an-object", '["a"]\n', "line 1: expected a JSON object"),
    ("missing-field", '{"text": "a"}\n', 'line 1: no "prompt" field'),
    ("empty-prompt", '{"prompt": "  "}\n', "line 1: \"prompt\" is '  '"),
    ("task-not-a-string", '{"prompt": "a", "task": 3}\n', '"task" must be a string'),
]


@pytest.mark.parametrize("content, message", [case[1:] for case in BAD_FILES], ids=[case[0] for case in BAD_FILES])
def test_bad_prompt_files_are_refused_naming_the_defect(tmp_path, content, message):
    path = tmp_path / "prompts.jsonl"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match="^prompts: ") as error:
        read_prompts(path)
    assert message in str(error.value) and "\n" not in str(error.value)


@pytest.fixture(scope="module")
def saved_datasets(tmp_path_factory):
    """A DatasetDict with train/test splits and a single Dataset, saved to disk."""
    datasets = pytest.importorskip("datasets")
    root = tmp_path_factory.mktemp("datasets")
    splits = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict({"text": ["a b", "c d"], "label": [0, 1]}),
            "test": datasets.Dataset.from_dict({"text": ["e f"], "question": ["b c"], "label": [1]}),
        }
    )
    splits.save_to_disk(root / "splits")
    datasets.Dataset.from_dict({"instruction": ["a", "b c"], "other": ["", "x"]}).save_to_disk(root / "single")
    return root


def test_dataset_prompts_read_splits_and_fields(saved_datasets):
    splits, single = saved_datasets / "splits", saved_datasets / "single"
    assert dataset_prompts(str(splits)).prompts == ("a b", "c d")  # train, the first known field (text)
    assert dataset_prompts(f"{splits}:test").prompts == ("e f",)
    assert dataset_prompts(f"{splits}:test:question").prompts == ("b c",)
    assert dataset_prompts(str(single)).prompts == ("a", "b c")
    assert dataset_prompts(str(single)).tasks == ("", "")


BAD_DATASETS = [
    ("unknown-split", "{splits}:validation", "has no split 'validation'; its splits: train, test"),
    ("unknown-field", "{splits}:train:prompt", "has no field 'prompt'; its fields: text, label"),
    ("too-many-parts", "{splits}:train:label:x", "expected NAME[:SPLIT[:FIELD]]"),
    ("empty-part", "{splits}::text", "non-empty parts"),
    ("split-of-a-single-dataset", "{single}:train", "one saved dataset without splits"),
]


@pytest.mark.parametrize("spec, message", [case[1:] for case in BAD_DATASETS], ids=[case[0] for case in BAD_DATASETS])
def test_bad_dataset_specs_are_refused_naming_the_defect(saved_datasets, spec, message):
    spec = spec.format(splits=saved_datasets / "splits", single=saved_datasets / "single")
    with pytest.raises(ValueError, match="^dataset: ") as error:
        dataset_prompts(spec)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_dataset_rows_must_be_non_empty_strings(tmp_path):
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_dict({"prompt": ["a", " "]}).save_to_disk(tmp_path / "d")
    with pytest.raises(ValueError, match="row 1: field 'prompt' must be a non-empty string"):
        dataset_prompts(str(tmp_path / "d"))


def test_an_unreachable_hub_fails_at_once_saying_what_to_pass(monkeypatch):
    pytest.importorskip("datasets")
    from multidraft.decoding import models

    for name in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(models, "_hub_reachable", lambda timeout=3.0: False)
    with pytest.raises(ValueError, match=r"^dataset: 'someone/prompts' cannot be downloaded .*--prompts FILE"):
        dataset_prompts("someone/prompts:train:text")


def test_cli_dataset_offline_fails_in_one_line(tiny_dir):
    pytest.importorskip("datasets")
    env = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    done = run_script([console_script(), "measure", "--model", str(tiny_dir), "--dataset", "nobody/no-such-prompts"], env, 300)
    error = one_line_error(done)
    assert "cannot be loaded (offline and not cached)" in error and "--prompts FILE" in error


# ---------------------------------------------------------------------------------------------
# Per-prompt seeds, shards merged in prompt order, per-task rows


def test_prompt_seeds_are_per_prompt():
    assert len({prompt_seeds(0, i) for i in range(50)}) == 50
    assert prompt_seeds(1, 0) != prompt_seeds(0, 1)


def test_a_prompt_measures_the_same_whatever_runs_beside_it():
    """Seeds per prompt: the first two prompts of a three-prompt run equal a run of those two
    (with seeds per run, the later prompts' streams depended on the earlier prompts)."""
    target = tiny_model(0)
    options = dict(k=2, length=2, max_new_tokens=4, baseline=False, progress=False, draft_sampling=Sampling(1.5))
    three = measure(target, None, prompts=["a b", "c d e", "f"], **options)
    two = measure(target, None, prompts=["a b", "c d e"], **options)
    assert three.texts[:2] == two.texts
    assert [r for r in three.records if r.prompt < 2] == list(two.records)


def test_shards_merged_equal_one_process_block_for_block():
    """The prompts split over two shards as torchrun's ranks split them, merged: every position
    record, block record and aggregate equals the one-process run, for several verifiers and
    scored ones."""
    target, draft = tiny_model(0), tiny_model(1)
    config = MeasureConfig(
        k=2, length=2, prompts=("a b", "c d e", "f", "b c"), max_new_tokens=4, baseline=True,
        verifiers=("token", "traversal"), scored=("selective", "token:optimal"),
    )  # fmt: skip
    specs = [DraftSpec(draft, sampling) for sampling in config.draft_sampling]
    whole = run_measurement(config, target, specs, progress=False)
    shards = [measure_shard(config, target, specs, shard_indices(4, rank, 2), progress=False) for rank in (1, 0)]
    merged = merge_shards(config, target, specs, shards)
    assert merged.records == whole.records and merged.block_records == whole.block_records
    assert merged.texts == whole.texts
    assert reproducible(merged.summary()) == reproducible(whole.summary())
    with pytest.raises(ValueError, match="every prompt 0..3 once"):
        merge_shards(config, target, specs, shards[:1])


def test_by_task_rows_split_the_first_verifier_positions():
    found = PromptSet(("a b", "c d e", "f a"), ("chat", "code", "chat"))
    result = measure(tiny_model(0), tiny_model(1), k=2, length=2, prompts=found, max_new_tokens=4, baseline=False, progress=False)
    tasks = result.by_task()
    assert [t.task for t in tasks] == ["chat", "code"] and [t.prompts for t in tasks] == [2, 1]
    assert sum(t.positions for t in tasks) == result.positions and sum(t.blocks for t in tasks) == result.blocks
    pooled = sum(t.empirical_acceptance * t.positions for t in tasks) / result.positions
    assert pooled == pytest.approx(result.empirical_acceptance, abs=1e-12)
    assert result.summary()["tasks"] == [t.summary() for t in tasks]
    untagged = measure(tiny_model(0), None, k=2, length=2, prompts=["a"], max_new_tokens=2, baseline=False, progress=False)
    assert untagged.by_task() == () and untagged.summary()["tasks"] == []


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(prompts=("a", "b"), tasks=("x",)), "one task per prompt, got 1 for 2"),
        (dict(prompts=("a",), tasks="x"), "expected a sequence of strings"),
        (dict(prompts=("a",), tasks=(3,)), "every task must be a string"),
        (dict(prompts=PromptSet(("a",), ("x",)), tasks=("y",)), "a PromptSet carries its tasks"),
    ],
    ids=["count", "string", "not-a-string", "both"],
)
def test_bad_tasks_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MeasureConfig(**kwargs)


def test_more_processes_than_prompts_are_refused():
    check_world(2, 2)
    with pytest.raises(ValueError, match="3 processes for 2 prompts; start at most 2"):
        check_world(2, 3)


# ---------------------------------------------------------------------------------------------
# Device maps


def test_a_device_map_placing_every_layer_gives_the_same_measurement(tiny_dir):
    """A device map dict (every module named, all on the CPU: the one device here) goes through
    accelerate's placement and measures exactly as a plain load; a map over several GPUs is
    the GPU check (docs)."""
    layers = {f"model.layers.{i}": "cpu" for i in range(2)}
    device_map = {"model.embed_tokens": "cpu", **layers, "model.norm": "cpu", "model.rotary_emb": "cpu", "lm_head": "cpu"}
    mapped = load_model(str(tiny_dir), device_map=device_map)
    assert {str(p.device) for p in mapped.model.parameters()} == {"cpu"}
    options = dict(k=2, length=2, prompts=["a b", "c"], max_new_tokens=4, baseline=False, progress=False)
    plain = measure(load_model(str(tiny_dir), device="cpu"), None, **options)
    assert measure(mapped, None, **options).records == plain.records
    assert measure(str(tiny_dir), None, device_map="auto", **options).records == plain.records
    with pytest.raises(ValueError, match="give a device map or a device, not both"):
        measure(str(tiny_dir), None, device="cpu", device_map="auto", **options)


# ---------------------------------------------------------------------------------------------
# The command line: files, progress lines, torchrun


def test_cli_prompt_file_prints_a_line_per_prompt_and_a_task_table(cli, tiny_dir, tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", TAGGED)
    result = cli("measure", "--model", str(tiny_dir), "--prompts", str(path), "--max-new-tokens", "3", "--length", "2", "--no-baseline")
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert [line.split(": ", 2)[1] for line in lines] == [f"token:specinfer prompt {i} of 3" for i in (1, 2, 3)], lines
    assert all(line.startswith("measure: ") for line in lines)
    assert "by task (token:specinfer)" in result.stdout
    assert any(line.strip().startswith("chat  2 prompts") for line in result.stdout.splitlines()), result.stdout
    json_run = cli("measure", "--model", str(tiny_dir), "--prompts", str(path), "--max-prompts", "2", "--max-new-tokens", "3",
                   "--length", "2", "--no-baseline", "--json")  # fmt: skip
    assert [t["task"] for t in json_run.json()["tasks"]] == ["chat", "code"] and json_run.json()["prompts"] == 2


@pytest.mark.parametrize(
    "argv, env, message",
    [
        (["--prompts", "{missing}"], {}, "prompts: no such file"),
        (["--prompts", "{empty}"], {}, "holds no prompt"),
        (["--max-prompts", "2"], {}, "max-prompts: applies to --prompts or --dataset only"),
        (["--prompts", "bundled", "--max-prompts", "0"], {}, "max_prompts: expected an integer >= 1"),
        (["--device-map", "auto", "--device", "cpu"], {}, "device-map: places one model over every device"),
        (["--prompt", "a", "--prompt", "b"], {"WORLD_SIZE": "3", "RANK": "0"}, "torchrun: 3 processes for 2 prompts"),
    ],
    ids=["missing-file", "empty-file", "max-prompts-alone", "max-prompts-zero", "device-map-and-device", "ranks-over-prompts"],
)
def test_cli_measure_refuses_in_one_line(tiny_dir, tmp_path, argv, env, message):
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    argv = [a.format(missing=tmp_path / "nope.jsonl", empty=empty) for a in argv]
    done = run_script([console_script(), "measure", "--model", str(tiny_dir), *argv], env, 300)
    assert message in one_line_error(done)


def test_cli_prompt_sources_exclude_each_other(cli):
    result = cli("measure", "--prompt", "a", "--prompts", "bundled")
    assert result.returncode == 2 and "not allowed with argument" in result.stderr


def test_torchrun_two_gloo_processes_equal_one_process(cli, tiny_dir, tmp_path):
    """``torchrun --nproc_per_node 2 -m multidraft measure`` (gloo on the CPU) prints one merged
    result equal to the one-process run's, every verifier and scored one included."""
    torchrun = Path(sysconfig.get_path("scripts")) / "torchrun"
    if not torchrun.is_file():
        pytest.skip("torchrun is not installed beside this Python")
    path = write_jsonl(tmp_path / "p.jsonl", [*TAGGED, {"task": "code", "prompt": "b"}, {"task": "math", "prompt": "d d"}])
    argv = ["measure", "--model", str(tiny_dir), "--prompts", str(path), "--max-new-tokens", "3", "--length", "2", "--threads", "1",
            "--verifier", "token", "traversal", "--score", "selective", "token:optimal", "--json"]  # fmt: skip
    one = cli(*argv)
    assert one.returncode == 0, one.stderr
    # --standalone: a local rendezvous on a free port (two concurrent test runs do not collide)
    two = run_script([str(torchrun), "--standalone", "--nproc_per_node", "2", "-m", "multidraft", *argv], {"OMP_NUM_THREADS": "1"}, 300)
    assert two.returncode == 0, two.stderr[-3000:]
    assert two.stdout.count("\n") == 1, two.stdout  # one result, from rank 0
    merged = json.loads(two.stdout)
    assert reproducible(merged) == reproducible(one.json())
    assert "[rank 1/2]" in two.stderr and "[rank 0/2]" in two.stderr
