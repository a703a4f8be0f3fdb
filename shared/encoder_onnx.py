"""The encoder on ONNX Runtime (CPU): the same transformers checkpoint exported to ONNX, fused, and for
``onnx-int8`` dynamically quantised (int8 weights, per output channel; activations quantised per batch at run
time).

Its speed and its cosine to the torch fp32 path are measured by ``benchmarks/encoder_speed.py`` (the docs'
measurements page). Weights are quantised per channel: per tensor, the vectors drifted further from fp32. The fusion
is ``onnxruntime.transformers.optimizer``'s (Attention, EmbedLayerNormalization, SkipLayerNormalization, BiasGelu).

The artefact (``<runtime>.onnx`` with a manifest ``<runtime>.json`` naming the checkpoint's fingerprint) is built
once, on first use or by ``newsmon model build-onnx``, in ``<home>/models/onnx/<weights key>/`` (next to the
imported model; :func:`weights_key`: checkpoints with the same weights share it). An artefact prebuilt in
``<model dir>/onnx/`` (the container image, whose model folder is read-only) is used first. An artefact whose
manifest names other weights (the checkpoint changed) is rebuilt.

The model identity of an ONNX runtime is ``<fp32 identity>+<runtime>-v1`` (:func:`runtime_model_id`), so
vectors of different runtimes never share an embedding-cache key or a memory collection.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import structlog

log = structlog.get_logger(__name__)

#: Runtimes that run on ONNX Runtime, and the artefact format version of each (part of the model identity).
ONNX_RUNTIMES = {"onnx-int8": "onnx-int8-v1", "onnx-fp32": "onnx-fp32-v1"}
OPSET = 17


def runtime_model_id(fp32_id: str, runtime: str) -> str:
    """The model identity of a runtime: the fp32 identity for ``torch``, ``<fp32 id>+<format>`` otherwise
    (``...@abcd+onnx-int8-v1``).

    Raises:
        ValueError: an unknown runtime.
    """
    if runtime == "torch":
        return fp32_id
    if runtime not in ONNX_RUNTIMES:
        raise ValueError(f"unknown encoder runtime {runtime!r}; one of torch, {', '.join(ONNX_RUNTIMES)}")
    return f"{fp32_id}+{ONNX_RUNTIMES[runtime]}"


def weights_key(model_path: str) -> str:
    """What an artefact is built from: for a local directory a hash of its config and the size and first/last
    MiB of each weights file (two checkpoints with the same weights share an artefact, whatever their model
    id); for a hub id the id itself."""
    p = Path(model_path)
    if not p.is_dir():
        return re.sub(r"[^A-Za-z0-9_.-]+", "_", model_path).strip("_")
    h = hashlib.sha256()
    hash_checkpoint_files(h, p)
    return f"{p.name}@{h.hexdigest()[:16]}"


def hash_checkpoint_files(h, directory: Path) -> None:
    """Feed a checkpoint directory's ``config.json`` and, per weights file (``*.safetensors``, ``*.bin``), its
    name, size and first and last MiB into the hash ``h`` (a ``hashlib`` object): cheap, and distinct for
    different weights. Shared by the model fingerprint and the ONNX artefact's weights key."""
    if (directory / "config.json").exists():
        h.update((directory / "config.json").read_bytes())
    for w in sorted(directory.glob("*.safetensors")) + sorted(directory.glob("*.bin")):
        size = w.stat().st_size
        h.update(f"{w.name}:{size}".encode())
        with w.open("rb") as fh:
            h.update(fh.read(1 << 20))
            fh.seek(max(0, size - (1 << 20)))
            h.update(fh.read(1 << 20))


def artefact_dirs(model_path: str, home: Path) -> list[Path]:
    """Where the artefact of a checkpoint may be, in the order looked at: ``<model dir>/onnx`` (prebuilt next
    to a local checkpoint, as in the container image), then ``<home>/models/onnx/<weights key>`` (built on
    first use, next to the imported model)."""
    dirs = [Path(model_path) / "onnx"] if Path(model_path).is_dir() else []
    return dirs + [Path(home).expanduser() / "models" / "onnx" / weights_key(model_path)]


def _valid(directory: Path, runtime: str, key: str) -> bool:
    try:
        manifest = json.loads((directory / f"{runtime}.json").read_text())
    except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError):
        return False
    return (manifest.get("source") == key and manifest.get("format") == ONNX_RUNTIMES[runtime]
            and (directory / f"{runtime}.onnx").exists())


def _writable(directory: Path) -> bool:
    """Whether ``directory`` (or its nearest existing parent) can be written by this process."""
    p = directory
    while not p.exists():
        p = p.parent
    return os.access(p, os.W_OK)


def ensure_artefact(model_path: str, runtime: str, home: Path, out_dir: Path | None = None) -> Path:
    """The ``.onnx`` file of ``runtime`` for the checkpoint at ``model_path``, built first when missing or stale
    (about a minute on 2 cores; a file lock keeps two processes from building it at once). ``out_dir`` forces
    where it is looked for and built (``newsmon model build-onnx --out``).

    Raises:
        ValueError: an unknown ONNX runtime.
        PermissionError: no artefact exists and no candidate folder is writable.
    """
    if runtime not in ONNX_RUNTIMES:
        raise ValueError(f"not an ONNX runtime: {runtime!r}")
    key = weights_key(model_path)
    dirs = [out_dir] if out_dir is not None else artefact_dirs(model_path, home)
    for d in dirs:
        if _valid(d, runtime, key):
            return d / f"{runtime}.onnx"
    target = out_dir if out_dir is not None else next((d for d in reversed(dirs) if _writable(d)), None)
    if target is None or not _writable(target):
        raise PermissionError(f"no ONNX artefact for {model_path} and none of {[str(d) for d in dirs]} is "
                              "writable; run `newsmon model build-onnx` where it is, or set "
                              "NEWSMON_ENCODER__RUNTIME=torch")
    target.mkdir(parents=True, exist_ok=True)
    with _locked(target / ".build.lock"):
        if not _valid(target, runtime, key):  # another process may have built it meanwhile
            build_artefact(model_path, runtime, key, target)
    return target / f"{runtime}.onnx"


@contextmanager
def _locked(path: Path):
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def build_artefact(model_path: str, runtime: str, key: str, out_dir: Path) -> Path:
    """Export the checkpoint to ONNX (opset 17, dynamic batch and sequence axes, output
    ``last_hidden_state``), fuse it for BERT-like encoders, and for ``onnx-int8`` quantise its weights to
    int8 per channel (``onnxruntime.quantization.quantize_dynamic``). Writes ``<runtime>.onnx`` and its
    manifest ``<runtime>.json`` into ``out_dir`` atomically; returns the ``.onnx`` path.
    """
    started = time.perf_counter()
    log.info("building the ONNX encoder artefact (once)", runtime=runtime, model=key, out=str(out_dir))
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".build-") as tmp:
        raw, fused = Path(tmp) / "raw.onnx", Path(tmp) / "fused.onnx"
        hidden, heads = _export(model_path, raw)
        _fuse(raw, fused, heads, hidden)
        raw.unlink()
        final = Path(tmp) / f"{runtime}.onnx"
        if runtime == "onnx-int8":
            _quantise(fused, final)
        else:
            fused.rename(final)
        os.replace(final, out_dir / f"{runtime}.onnx")
    import onnxruntime

    manifest = {"source": key, "format": ONNX_RUNTIMES[runtime], "runtime": runtime, "opset": OPSET,
                "onnxruntime": onnxruntime.__version__, "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "build_s": round(time.perf_counter() - started, 1)}
    tmp_manifest = out_dir / f".{runtime}.json.tmp"
    tmp_manifest.write_text(json.dumps(manifest, indent=2))
    os.replace(tmp_manifest, out_dir / f"{runtime}.json")
    log.info("ONNX encoder artefact built", runtime=runtime, seconds=manifest["build_s"])
    return out_dir / f"{runtime}.onnx"


def _export(model_path: str, out: Path) -> tuple[int, int]:
    """torch -> ONNX (the TorchScript exporter: no onnxscript needed); returns (hidden size, attention heads)."""
    import torch  # deferred: only a build needs torch
    from transformers import AutoModel, AutoTokenizer

    class LastHidden(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask):
            return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    model = AutoModel.from_pretrained(model_path, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(model_path, fix_mistral_regex=False)
    sample = tok(["a short sample", "a somewhat longer sample text for the export"], padding=True,
                 return_tensors="pt")
    axes = {0: "batch", 1: "tokens"}
    with torch.inference_mode():
        torch.onnx.export(LastHidden(model), (sample["input_ids"], sample["attention_mask"]), str(out),
                          dynamo=False, input_names=["input_ids", "attention_mask"],
                          output_names=["last_hidden_state"], opset_version=OPSET,
                          dynamic_axes={"input_ids": axes, "attention_mask": axes, "last_hidden_state": axes})
    return int(model.config.hidden_size), int(model.config.num_attention_heads)


def _fuse(raw: Path, out: Path, heads: int, hidden: int) -> None:
    """ONNX Runtime's transformer fusions (Attention, EmbedLayerNormalization, SkipLayerNormalization,
    BiasGelu); a graph they do not match is saved as it is."""
    from onnxruntime.transformers.optimizer import optimize_model

    opt = optimize_model(str(raw), model_type="bert", num_heads=heads, hidden_size=hidden)
    log.debug("fused", ops={k: v for k, v in opt.get_fused_operator_statistics().items() if v})
    opt.save_model_to_file(str(out))


def _quantise(fused: Path, out: Path) -> None:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    logging.disable(logging.WARNING)  # the quantiser's advice to pre-process goes to the root logger
    try:
        quantize_dynamic(str(fused), str(out), weight_type=QuantType.QInt8, per_channel=True,
                         extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    finally:
        logging.disable(logging.NOTSET)


class OnnxBackend:
    """Runs the artefact on ONNX Runtime's CPU provider: ``embed(ids, mask) -> (b, d)`` float32, rows pooled and
    L2-normalised.

    Args:
        path: the ``.onnx`` file; threads: intra-op threads (None: ONNX Runtime's default, one per core);
        pooling: ``mean`` (over the attention mask) or ``cls``; per_text: run each text alone, on its own
            tokens (no padding). The int8 artefact needs it: dynamic quantisation sets the activations' int8 range
            per input tensor, so in a batch a text's vector depends on the other texts and the padding (cosine
            0.997 to the same text alone), and the same article would get other neighbours in the stream, in
            ``eval`` and from the embedding cache. On 2 CPU cores a batch is not faster than its texts one by one
            (README "The encoder on CPU").
    """

    def __init__(self, path: Path, threads: int | None, pooling: str, per_text: bool = False):
        import onnxruntime as ort  # deferred: only an ONNX encoder needs it

        so = ort.SessionOptions()
        if threads:
            so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        self.inputs = {i.name for i in self.session.get_inputs()}
        self.pooling = pooling
        self.path = path
        self.per_text = per_text

    def embed(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        """A padded batch ``(b, L)`` int64 (right padding) -> ``(b, d)`` float32 normalised: one forward pass, or
        with ``per_text`` one per text over its unpadded tokens."""
        if not self.per_text:
            return self._forward(input_ids, attention_mask)
        n = attention_mask.sum(axis=1)
        return np.concatenate([self._forward(input_ids[i:i + 1, :n[i]], attention_mask[i:i + 1, :n[i]])
                               for i in range(len(input_ids))])

    def _forward(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        feed = {"input_ids": input_ids.astype(np.int64), "attention_mask": attention_mask.astype(np.int64)}
        if "token_type_ids" in self.inputs:  # a fused EmbedLayerNormalization may ask for it
            feed["token_type_ids"] = np.zeros_like(feed["input_ids"])
        hidden = self.session.run(None, {k: v for k, v in feed.items() if k in self.inputs})[0]
        return pool(hidden, attention_mask, self.pooling)


def pool(hidden: np.ndarray, attention_mask: np.ndarray, pooling: str) -> np.ndarray:
    """``(b, L, d)`` hidden states -> ``(b, d)`` float32: the CLS row or the mean over the mask, L2-normalised."""
    if pooling == "cls":
        v = hidden[:, 0].astype(np.float32)
    else:
        m = attention_mask[..., None].astype(np.float32)
        v = (hidden * m).sum(1) / np.maximum(m.sum(1), 1.0)
    return (v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)).astype(np.float32)


def remove_artefacts(model_path: str, home: Path) -> None:
    """Delete every built artefact of a checkpoint (tests; a clean rebuild)."""
    for d in artefact_dirs(model_path, home):
        if d.exists() and _writable(d):
            shutil.rmtree(d, ignore_errors=True)
