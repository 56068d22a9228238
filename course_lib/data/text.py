"""Text for BERT: a corpus, a WordPiece tokenizer, packed sequences and MLM masking (lesson 07_bert_lamb).

Three steps, each cached or cheap:

1. **Corpus** (:func:`load_corpus`): any directory of ``.txt``/``.rst``/``.md`` files you
   name; else, offline, Debian's ``python3.11-doc`` reST sources (about 11 MB, in
   ``/usr/share/doc/python3.11/html/_sources`` as ``*.rst.txt``) when installed; else
   Python's own help texts from ``pydoc_data.topics`` (about 465 KB, shipped with
   every CPython — the smoke profile and the last fallback). WikiText-103 or
   WikiText-2 can be downloaded (:func:`download_wikitext`) by learners with internet.
2. **Tokenizer** (:func:`train_tokenizer`): BERT's WordPiece (lowercasing normalizer,
   whitespace+punctuation pre-tokenizer) trained on the corpus with Hugging Face
   ``tokenizers``, fully offline, cached on disk keyed by the corpus checksum and the
   trainer settings.
3. **MLM data** (:func:`build_mlm_data`): the corpus tokenized once and packed into
   fixed-length ``[CLS] ... [SEP]`` sequences held as one tensor on the device; each
   batch is masked BERT's way (:func:`mask_tokens`): 15% of the non-special tokens are
   chosen; of those 80% become ``[MASK]``, 10% a random token, 10% stay; labels are
   -100 everywhere else.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import urllib.error
import zipfile
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch

from ..fileio import atomic_write_text, cache_dir, download, file_digest

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
TEXT_SUFFIXES = (".txt", ".rst", ".md")
DEBIAN_DOC_DIRS = tuple(f"/usr/share/doc/python3.{minor}/html/_sources" for minor in (11, 12, 13, 10))
IGNORE_INDEX = -100  # what F.cross_entropy skips

# WikiText (Merity et al. 2016, CC BY-SA). SHA-1 of the archives as listed by GluonNLP's
# dataset registry; the original S3 bucket has moved, so the mirror is tried too.
WIKITEXT = {
    "wikitext-2": {
        "file": "wikitext-2-v1.zip",
        "sha1": "3c914d17d80b1459be871a5039ac23e752a53cbe",
        "train": "wikitext-2/wiki.train.tokens",
    },
    "wikitext-103": {
        "file": "wikitext-103-v1.zip",
        "sha1": "0aec09a7537b58d4bb65362fee27650eeaba625a",
        "train": "wikitext-103/wiki.train.tokens",
    },
}
WIKITEXT_URLS = ("https://wikitext.smerity.com/{file}", "https://s3.amazonaws.com/research.metamind.io/wikitext/{file}")


class CorpusError(RuntimeError):
    """A corpus could not be found, read, downloaded or verified."""






# --------------------------------------------------------------------------- the corpus


@dataclass(frozen=True)
class Corpus:
    """Documents (one string each) and where they came from."""

    name: str
    source: str  # a directory, "pydoc_data.topics", or an archive path
    documents: tuple[str, ...]

    @property
    def num_chars(self) -> int:
        return sum(len(d) for d in self.documents)

    @property
    def checksum(self) -> str:
        """SHA-256 over the documents in order: the tokenizer cache key."""
        h = hashlib.sha256()
        for d in self.documents:
            h.update(d.encode("utf-8"))
            h.update(b"\x00")
        return h.hexdigest()

    def describe(self) -> str:
        return (f"corpus: {self.name} — {len(self.documents):,} documents, {self.num_chars / 1e6:.2f} M characters "
                f"(from {self.source})")


def describe_corpus(corpus: Corpus) -> str:
    """One line saying which corpus ran and its size (the lesson prints it)."""
    return corpus.describe()


def read_text_dir(directory: str | os.PathLike, suffixes: tuple[str, ...] = TEXT_SUFFIXES,
                  name: str | None = None) -> Corpus:
    """Every ``.txt``/``.rst``/``.md`` file under ``directory`` (recursively, sorted), one document each.

    ``.rst.txt`` (Sphinx's ``_sources``) counts as ``.txt``. Undecodable bytes are replaced.
    """
    root = Path(directory).expanduser()
    if not root.is_dir():
        raise CorpusError(f"text directory {str(root)!r} does not exist or is not a directory")
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in suffixes)
    docs = []
    for p in files:
        text = p.read_text(encoding="utf-8", errors="replace").strip()
        if text:
            docs.append(text)
    if not docs:
        raise CorpusError(f"no non-empty {'/'.join(suffixes)} files under {str(root)!r}")
    return Corpus(name or root.name, str(root), tuple(docs))


def pydoc_corpus() -> Corpus:
    """Python's help texts (``pydoc_data.topics``, shipped with CPython): about 465 KB, no download."""
    from pydoc_data.topics import topics

    docs = tuple(topics[k].strip() for k in sorted(topics) if topics[k].strip())
    return Corpus("pydoc_data.topics", "pydoc_data.topics (CPython's built-in help texts)", docs)


def debian_doc_dir() -> Path | None:
    """Debian/Ubuntu ``python3.X-doc`` reST sources, when that package is installed."""
    for d in DEBIAN_DOC_DIRS:
        if Path(d).is_dir():
            return Path(d)
    return None


def load_corpus(which: str = "auto", text_dir: str | os.PathLike | None = None) -> Corpus:
    """The lesson's corpus.

    ``which``: ``"auto"`` (``text_dir`` or ``$COURSE_TEXT_DIR`` if given, else the
    Debian python-doc sources if installed, else pydoc_data), ``"pydoc"`` (always the
    small built-in one), ``"dir"`` (``text_dir`` required), ``"wikitext-2"`` /
    ``"wikitext-103"`` (downloaded once into the cache, checksum-verified).
    """
    text_dir = text_dir or os.environ.get("COURSE_TEXT_DIR") or None
    if which == "pydoc":
        return pydoc_corpus()
    if which == "dir" or (which == "auto" and text_dir):
        if not text_dir:
            raise CorpusError("load_corpus('dir') needs text_dir (or $COURSE_TEXT_DIR)")
        return read_text_dir(text_dir)
    if which in WIKITEXT:
        return wikitext_corpus(which)
    if which != "auto":
        raise ValueError(f"corpus {which!r}; choose auto, pydoc, dir, {', '.join(WIKITEXT)}")
    debian = debian_doc_dir()
    if debian is not None:
        return read_text_dir(debian, name=f"python-doc reST sources ({debian.parent.parent.name})")
    return pydoc_corpus()




def _check_sha1(path: Path, *, expected: str, url: str) -> None:
    got = file_digest(path, "sha1")
    if got != expected:
        raise CorpusError(f"SHA-1 {got} != expected {expected} (truncated or corrupt download from {url})")


def download_wikitext(name: str = "wikitext-2", directory: str | os.PathLike | None = None, *,
                      timeout: float = 60.0) -> Path:
    """Fetch the WikiText archive into the cache (temp name, SHA-1 check, then rename); return its path."""
    if name not in WIKITEXT:
        raise ValueError(f"unknown WikiText {name!r}; choose one of {tuple(WIKITEXT)}")
    spec = WIKITEXT[name]
    target = Path(directory or cache_dir()) / spec["file"]
    if target.is_file() and file_digest(target, "sha1") == spec["sha1"]:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    errors = []
    for template in WIKITEXT_URLS:
        url = template.format(file=spec["file"])
        try:
            return download(url, target, verify=partial(_check_sha1, expected=spec["sha1"], url=url),
                            timeout=timeout)
        except (urllib.error.URLError, OSError, ValueError, CorpusError) as exc:
            errors.append(f"{url}: {exc}")
    raise CorpusError(
        f"could not download {spec['file']}:\n  " + "\n  ".join(errors)
        + f"\nWithout internet, put the archive at {target} yourself, or pass a text directory "
        "(load_corpus('dir', text_dir=...)); the lesson falls back to the built-in pydoc_data text.")


def wikitext_corpus(name: str = "wikitext-2", directory: str | os.PathLike | None = None) -> Corpus:
    """The WikiText training split as documents (one per top-level ``= Title =`` article)."""
    archive = download_wikitext(name, directory)
    with zipfile.ZipFile(archive) as z:
        text = z.read(WIKITEXT[name]["train"]).decode("utf-8")
    docs, current = [], []
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("= ") and s.endswith(" =") and not s.startswith("= ="):  # a new article
            if current:
                docs.append("\n".join(current))
            current = []
        if s:
            current.append(s)
    if current:
        docs.append("\n".join(current))
    return Corpus(name, str(archive), tuple(docs))


# --------------------------------------------------------------------------- the tokenizer


def _tokenizer_key(corpus: Corpus, vocab_size: int, min_frequency: int, lowercase: bool) -> str:
    import tokenizers

    settings = json.dumps({"corpus": corpus.checksum, "vocab_size": vocab_size, "min_frequency": min_frequency,
                           "lowercase": lowercase, "specials": SPECIAL_TOKENS,
                           "tokenizers": tokenizers.__version__}, sort_keys=True)
    return hashlib.sha256(settings.encode()).hexdigest()[:16]


def tokenizer_path(corpus: Corpus, vocab_size: int, min_frequency: int = 2, lowercase: bool = True,
                   directory: str | os.PathLike | None = None) -> Path:
    """Where the tokenizer for this corpus and these settings is cached."""
    key = _tokenizer_key(corpus, vocab_size, min_frequency, lowercase)
    return Path(directory or cache_dir()) / "tokenizers" / f"wordpiece-{vocab_size}-{key}.json"


def train_tokenizer(corpus: Corpus, vocab_size: int = 8192, *, min_frequency: int = 2, lowercase: bool = True,
                    directory: str | os.PathLike | None = None):
    """A BERT WordPiece tokenizer for ``corpus`` (cached: a second call loads it, no retraining).

    Returns a ``tokenizers.Tokenizer`` with an extra attribute ``from_cache`` (bool).
    Special tokens get ids 0-4 in the order ``[PAD] [UNK] [CLS] [SEP] [MASK]``.
    """
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    path = tokenizer_path(corpus, vocab_size, min_frequency, lowercase, directory)
    if path.is_file():
        tok = Tokenizer.from_file(str(path))
        tok.from_cache = True
        return tok
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                strip_accents=None, lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                        special_tokens=list(SPECIAL_TOKENS), show_progress=False,
                                        continuing_subword_prefix="##")
    tok.train_from_iterator(iter(corpus.documents), trainer=trainer, length=len(corpus.documents))
    atomic_write_text(path, tok.to_str())
    tok.from_cache = False
    return tok


# --------------------------------------------------------------------------- packing and masking


@dataclass(frozen=True)
class SpecialIds:
    pad: int
    unk: int
    cls: int
    sep: int
    mask: int

    @classmethod
    def from_tokenizer(cls, tok) -> "SpecialIds":
        ids = [tok.token_to_id(t) for t in SPECIAL_TOKENS]
        if any(i is None for i in ids):
            raise ValueError(f"tokenizer lacks one of the special tokens {SPECIAL_TOKENS}")
        return cls(*ids)

    @property
    def all(self) -> tuple[int, ...]:
        return (self.pad, self.unk, self.cls, self.sep, self.mask)


def pack_sequences(token_ids: torch.Tensor, seq_len: int, cls_id: int, sep_id: int) -> torch.Tensor:
    """Cut one long token stream into ``(N, seq_len)`` rows ``[CLS] t1 ... t_{L-2} [SEP]``; the ragged tail is dropped.

    Packing wastes no compute on padding (RoBERTa's FULL-SENTENCES packing, without the
    document separators): every position of every row is a real token.
    """
    if seq_len < 3:
        raise ValueError(f"seq_len must be at least 3 ([CLS] token [SEP]), got {seq_len}")
    body = seq_len - 2
    n = token_ids.numel() // body
    if n == 0:
        raise ValueError(f"{token_ids.numel()} tokens are fewer than one sequence of {seq_len}")
    rows = token_ids[: n * body].view(n, body)  # (N, L-2)
    cls = torch.full((n, 1), cls_id, dtype=rows.dtype, device=rows.device)
    sep = torch.full((n, 1), sep_id, dtype=rows.dtype, device=rows.device)
    return torch.cat([cls, rows, sep], dim=1)  # (N, L)


def mask_tokens(ids: torch.Tensor, *, vocab_size: int, special: SpecialIds, generator: torch.Generator,
                mask_prob: float = 0.15, replace_mask: float = 0.8, replace_random: float = 0.1,
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's masking of a ``(B, T)`` batch: returns ``(inputs, labels)``, both ``(B, T)`` int64.

    Each non-special token is chosen with probability ``mask_prob``; a chosen token
    becomes ``[MASK]`` with probability ``replace_mask``, a random non-special token with
    ``replace_random``, and stays itself otherwise (Devlin et al. 2018: 15%, 80/10/10).
    ``labels`` holds the original id at chosen positions and -100 elsewhere.
    All tensor ops on ``ids.device`` with ``generator`` (which must live on that device).
    """
    is_special = torch.zeros_like(ids, dtype=torch.bool)
    for s in special.all:
        is_special |= ids == s
    chosen = (torch.rand(ids.shape, generator=generator, device=ids.device) < mask_prob) & ~is_special
    how = torch.rand(ids.shape, generator=generator, device=ids.device)
    to_mask = chosen & (how < replace_mask)
    to_random = chosen & (how >= replace_mask) & (how < replace_mask + replace_random)
    # Random replacements come from the ordinary vocabulary (ids after the specials).
    first_ordinary = max(special.all) + 1
    random_ids = torch.randint(first_ordinary, vocab_size, ids.shape, generator=generator, device=ids.device)
    inputs = torch.where(to_mask, torch.full_like(ids, special.mask), ids)
    inputs = torch.where(to_random, random_ids, inputs)
    labels = torch.where(chosen, ids, torch.full_like(ids, IGNORE_INDEX))
    return inputs, labels


@dataclass
class MLMData:
    """Packed sequences on the device, a tokenizer, and a fixed masked held-out set (lesson 07).

    ``train_ids``: ``(N_train, seq_len)``; ``eval_inputs``/``eval_labels``: the held-out
    rows masked once with a fixed seed, so every evaluation scores the same positions.
    """

    corpus_name: str
    corpus_description: str
    tokenizer: object
    special: SpecialIds
    vocab_size: int
    seq_len: int
    train_ids: torch.Tensor
    eval_inputs: torch.Tensor
    eval_labels: torch.Tensor
    num_tokens: int

    @property
    def device(self) -> torch.device:
        return self.train_ids.device

    @property
    def num_train(self) -> int:
        return self.train_ids.shape[0]

    def sample(self, batch_size: int, generator: torch.Generator) -> torch.Tensor:
        """``batch_size`` random training rows (with replacement across batches, not within one)."""
        if batch_size <= self.num_train:
            idx = torch.randperm(self.num_train, generator=generator, device=self.device)[:batch_size]
        else:
            idx = torch.randint(0, self.num_train, (batch_size,), generator=generator, device=self.device)
        return self.train_ids[idx]

    def masked_batch(self, batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """A masked batch ``(inputs, labels)`` of ``batch_size`` training rows."""
        return mask_tokens(self.sample(batch_size, generator), vocab_size=self.vocab_size, special=self.special,
                           generator=generator)

    def unigram_loss(self) -> float:
        """The held-out MLM loss of a model that knows only how often each token occurs.

        Cross-entropy on the held-out labels of the training rows' token frequencies
        (add-one smoothed; special tokens are never labels, so they are not counted). A
        run stuck near this loss has learned nothing about context.
        """
        ids = self.train_ids.flatten()
        counts = torch.bincount(ids, minlength=self.vocab_size).double() + 1.0
        counts[list(self.special.all)] = 0.0
        log_p = (counts / counts.sum()).log()
        labels = self.eval_labels[self.eval_labels != IGNORE_INDEX]
        return float(-log_p[labels].mean())

    def describe(self) -> str:
        return (f"{self.corpus_description}\n"
                f"tokens: {self.num_tokens:,} (WordPiece vocabulary {self.vocab_size:,}); "
                f"{self.num_train:,} training + {self.eval_inputs.shape[0]:,} held-out sequences of "
                f"{self.seq_len} tokens; on {self.device}")

    def stats(self) -> dict:
        return {"corpus": self.corpus_name, "tokens": self.num_tokens, "vocab_size": self.vocab_size,
                "seq_len": self.seq_len, "train_sequences": self.num_train,
                "eval_sequences": int(self.eval_inputs.shape[0])}


ENCODE_CHUNK_DOCUMENTS = 256  # documents per encode_batch call in build_mlm_data


def build_mlm_data(corpus: Corpus, *, vocab_size: int = 8192, seq_len: int = 128, eval_fraction: float = 0.05,
                   max_eval_sequences: int = 512, device: torch.device | str = "cpu", seed: int = 0,
                   tokenizer=None, max_tokens: int | None = None, held_out: str = "random") -> MLMData:
    """Tokenize ``corpus`` once, pack it, split off the held-out rows and put it on ``device``.

    ``eval_fraction`` of the packed rows (at most ``max_eval_sequences``) are held out:
    ``held_out="random"`` draws them at random (``seed``) from the whole text, so they come from
    the same documents as the training rows and their loss is comparable with the training loss;
    ``"tail"`` takes the last rows of the stream, one contiguous block of other documents (a held-out
    loss that differs from the training loss for that reason alone). ``max_tokens`` truncates the
    stream (smoke runs).
    """
    if held_out not in ("random", "tail"):
        raise ValueError(f"held_out={held_out!r}: choose 'random' or 'tail'")
    device = torch.device(device)
    tok = tokenizer if tokenizer is not None else train_tokenizer(corpus, vocab_size)
    special = SpecialIds.from_tokenizer(tok)
    stream = []
    documents = iter(corpus.documents)
    # a chunk of documents at a time: with max_tokens (smoke runs, every rank of lesson 07 on
    # WikiText-103) only what is kept is tokenized, not the whole corpus first
    while chunk := list(itertools.islice(documents, ENCODE_CHUNK_DOCUMENTS)):
        for enc in tok.encode_batch(chunk, add_special_tokens=False):
            stream.extend(enc.ids)
            stream.append(special.sep)  # a document boundary the model can see
            if max_tokens is not None and len(stream) >= max_tokens:
                break
        if max_tokens is not None and len(stream) >= max_tokens:
            break
    if max_tokens is not None:
        stream = stream[:max_tokens]
    ids = pack_sequences(torch.tensor(stream, dtype=torch.long), seq_len, special.cls, special.sep)
    n_eval = min(max_eval_sequences, max(1, int(round(eval_fraction * ids.shape[0]))))
    if ids.shape[0] - n_eval < 1:
        raise ValueError(f"only {ids.shape[0]} sequences of {seq_len} tokens: too few to hold out {n_eval}")
    if held_out == "random":
        ids = ids[torch.randperm(ids.shape[0], generator=torch.Generator().manual_seed(seed))]
    train_ids, eval_ids = ids[:-n_eval], ids[-n_eval:]
    g = torch.Generator().manual_seed(seed + 12345)  # the held-out masking never changes
    eval_inputs, eval_labels = mask_tokens(eval_ids, vocab_size=tok.get_vocab_size(), special=special, generator=g)
    return MLMData(corpus_name=corpus.name, corpus_description=corpus.describe(), tokenizer=tok,
                   special=special, vocab_size=tok.get_vocab_size(), seq_len=seq_len,
                   train_ids=train_ids.to(device), eval_inputs=eval_inputs.to(device),
                   eval_labels=eval_labels.to(device), num_tokens=len(stream))


def masking_rates(original: torch.Tensor, inputs: torch.Tensor, labels: torch.Tensor, special: SpecialIds) -> dict:
    """BERT's masking checked: chosen / non-special tokens, and [MASK] / random / kept among the chosen."""
    chosen = labels != IGNORE_INDEX
    non_special = torch.ones_like(original, dtype=torch.bool)
    for s in special.all:
        non_special &= original != s
    n = max(1, int(chosen.sum()))
    masked = int((chosen & (inputs == special.mask)).sum())
    kept = int((chosen & (inputs == original)).sum())
    return {"chosen": n / max(1, int(non_special.sum())), "mask": masked / n,
            "random": (n - masked - kept) / n, "keep": kept / n,
            "special_chosen": int((chosen & ~non_special).sum())}


def shape_only_mlm_data(vocab_size: int, seq_len: int, rows: int, *, device, seed: int = 0):
    """An :class:`MLMData` of random token ids: for timing a model shape, not for learning."""
    g = torch.Generator().manual_seed(seed)
    special = SpecialIds(0, 1, 2, 3, 4)
    ids = torch.randint(5, vocab_size, (rows + 8, seq_len), generator=g)
    ids[:, 0], ids[:, -1] = special.cls, special.sep
    eval_inputs, eval_labels = mask_tokens(ids[-8:], vocab_size=vocab_size, special=special, generator=g)
    return MLMData(corpus_name="random", corpus_description="random token ids (shape only)", tokenizer=None,
                   special=special, vocab_size=vocab_size, seq_len=seq_len, train_ids=ids[:-8].to(device),
                   eval_inputs=eval_inputs.to(device), eval_labels=eval_labels.to(device),
                   num_tokens=ids.numel())
