"""What the suite builds once and reuses, under $SUITE_CACHE (default ~/.cache/grokking-suite):
rendered polygon images (tasks/polygons.py) and de-quantized GGUF models. Anything there can be
deleted; it is made again when next needed.

A GGUF model costs transformers ~25 s on a CPU core at every load: it parses the file's metadata
in Python once for the tokenizer, once for the config and once for the weights (~300,000
vocabulary strings each time, for SmolLM2), then de-quantizes every tensor. `dequantized_gguf`
pays that once per file and saves what it built (the float32 weights as safetensors, the config,
the tokenizer) as a transformers directory that loads in a second or two. The copy holds exactly
the de-quantized tensors, so a model read from it computes what the GGUF file gives.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
from pathlib import Path


def cache_dir() -> Path:
    return Path(os.environ.get("SUITE_CACHE") or Path.home() / ".cache" / "grokking-suite")


def dequantized_gguf(folder: str, gguf_file: str) -> str | None:
    """A transformers directory equivalent to folder/gguf_file, made on first use; None when the
    cache cannot be written (the caller then reads the GGUF file itself). Keyed by the file's path,
    size and modification time and the transformers version, whose conversion it records."""
    import torch
    import transformers
    from safetensors.torch import save_file

    source = Path(folder) / gguf_file
    stat = source.stat()
    key = hashlib.sha256(
        f"{source.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{transformers.__version__}".encode()
    ).hexdigest()[:16]
    target = cache_dir() / "gguf" / f"{source.stem}-{key}"
    if (target / "config.json").exists():  # renamed into place last: present means complete
        return str(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".partial-"))
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes it private; the cache is meant to be shared
    except OSError as err:  # a read-only home is no reason to fail the run
        print(
            f"warning: cannot cache the de-quantized model in {target.parent} ({err.strerror}); reading the GGUF file",
            file=sys.stderr,
        )
        return None
    print(f"de-quantizing {source} once into {target}", file=sys.stderr, flush=True)
    try:
        kwargs = {"gguf_file": gguf_file, "local_files_only": True}
        transformers.AutoTokenizer.from_pretrained(folder, **kwargs).save_pretrained(tmp)
        model = transformers.AutoModel.from_pretrained(folder, dtype=torch.float32, **kwargs)
        # transformers will not save a model it de-quantized (save_pretrained refuses): its tensors
        # and its config without the GGUF quantizer are what a plain float32 model is made of.
        save_file(
            {k: v.contiguous() for k, v in model.state_dict().items()},
            tmp / "model.safetensors",
            metadata={"format": "pt"},
        )
        del model.config.quantization_config
        model.config.save_pretrained(tmp)  # config.json last: its presence marks a complete copy
        os.replace(tmp, target)
    except OSError as err:  # another process's copy came first (then use it), or the disk is full
        if not (target / "config.json").exists():
            print(
                f"warning: cannot cache the de-quantized model ({err.strerror}); reading the GGUF file", file=sys.stderr
            )
            return None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return str(target)
