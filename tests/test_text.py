"""course_lib.data.text: corpus reader, cached WordPiece tokenizer, packing, BERT masking (lesson 07)."""

import pytest
import torch

from course_lib.data import text
from course_lib.data.text import (SpecialIds, build_mlm_data, mask_tokens, masking_rates, pack_sequences,
                                  pydoc_corpus, read_text_dir, train_tokenizer)

SPECIAL = SpecialIds(pad=0, unk=1, cls=2, sep=3, mask=4)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_DATA_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_corpus_reader_on_a_temp_dir(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.txt").write_text("alpha beta")
    (tmp_path / "sub" / "b.rst").write_text("gamma delta")
    (tmp_path / "sub" / "c.rst.txt").write_text("epsilon")
    (tmp_path / "d.md").write_text("zeta")
    (tmp_path / "skip.py").write_text("not text")
    (tmp_path / "empty.txt").write_text("   ")
    c = read_text_dir(tmp_path)
    assert sorted(c.documents) == ["alpha beta", "epsilon", "gamma delta", "zeta"]
    assert c.num_chars == len("alpha betaepsilongamma deltazeta")
    assert "4 documents" in text.describe_corpus(c)
    with pytest.raises(text.CorpusError, match="does not exist"):
        read_text_dir(tmp_path / "missing")


def test_pydoc_corpus_is_offline_and_sizeable():
    c = pydoc_corpus()
    assert 300_000 < c.num_chars < 2_000_000 and len(c.checksum) == 64


def test_tokenizer_is_cached(cache, monkeypatch):
    corpus = text.Corpus("t", "test", tuple(pydoc_corpus().documents[:10]))
    tok = train_tokenizer(corpus, vocab_size=300)
    assert tok.from_cache is False
    assert [tok.token_to_id(t) for t in text.SPECIAL_TOKENS] == [0, 1, 2, 3, 4]

    def no_training(*a, **k):
        raise AssertionError("retrained although cached")

    import tokenizers

    monkeypatch.setattr(tokenizers.Tokenizer, "train_from_iterator", no_training)
    again = train_tokenizer(corpus, vocab_size=300)
    assert again.from_cache is True and again.get_vocab() == tok.get_vocab()
    assert list(cache.rglob("*.tmp")) == []  # atomic write left nothing behind


def test_packing_lengths_and_special_tokens():
    stream = torch.arange(10, 10 + 50)
    rows = pack_sequences(stream, seq_len=8, cls_id=2, sep_id=3)
    assert rows.shape == (50 // 6, 8)
    assert (rows[:, 0] == 2).all() and (rows[:, -1] == 3).all()
    assert torch.equal(rows[:, 1:-1].reshape(-1), stream[: rows.shape[0] * 6])


def test_masking_rates_and_specials_never_masked():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 1000, (512, 128), generator=g)
    ids[:, 0], ids[:, -1] = SPECIAL.cls, SPECIAL.sep
    ids[:, 50] = SPECIAL.pad
    inputs, labels = mask_tokens(ids, vocab_size=1000, special=SPECIAL, generator=g)
    r = masking_rates(ids, inputs, labels, SPECIAL)
    assert r["chosen"] == pytest.approx(0.15, abs=0.005)
    assert r["mask"] == pytest.approx(0.8, abs=0.01)
    assert r["random"] == pytest.approx(0.1, abs=0.01)
    assert r["keep"] == pytest.approx(0.1, abs=0.01)
    assert r["special_chosen"] == 0
    special_pos = (ids < 5)
    assert torch.equal(inputs[special_pos], ids[special_pos])
    assert (labels[labels != -100] >= 5).all()
    assert ((inputs >= 5) | (inputs == SPECIAL.mask) | special_pos).all()  # random tokens are ordinary ones


def test_masking_is_seeded():
    ids = torch.randint(5, 100, (4, 16))
    a = mask_tokens(ids, vocab_size=100, special=SPECIAL, generator=torch.Generator().manual_seed(1))
    b = mask_tokens(ids, vocab_size=100, special=SPECIAL, generator=torch.Generator().manual_seed(1))
    assert all(torch.equal(x, y) for x, y in zip(a, b))


def test_build_mlm_data_holds_out_rows_drawn_at_random_or_the_tail(cache):
    corpus = text.Corpus("t", "test", tuple(pydoc_corpus().documents[:20]))
    data = build_mlm_data(corpus, vocab_size=400, seq_len=32, max_tokens=8000)
    assert data.train_ids.shape[1] == 32 and data.eval_inputs.shape == data.eval_labels.shape
    assert data.num_train + data.eval_inputs.shape[0] == 8000 // 30
    inputs, labels = data.masked_batch(8, torch.Generator().manual_seed(0))
    assert inputs.shape == (8, 32) and (labels != -100).any()
    assert "held-out" in data.describe()

    tail = build_mlm_data(corpus, vocab_size=400, seq_len=32, max_tokens=8000, held_out="tail")
    again = build_mlm_data(corpus, vocab_size=400, seq_len=32, max_tokens=8000)

    def originals(d):
        return torch.where(d.eval_labels != text.IGNORE_INDEX, d.eval_labels, d.eval_inputs)

    every_row = sorted(map(tuple, torch.cat([data.train_ids, originals(data)]).tolist()))
    assert every_row == sorted(map(tuple, torch.cat([tail.train_ids, originals(tail)]).tolist()))  # each row once
    tail_rows = set(map(tuple, originals(tail).tolist()))
    assert sum(r in tail_rows for r in map(tuple, originals(data).tolist())) < len(tail_rows) / 2
    assert torch.equal(again.eval_inputs, data.eval_inputs) and torch.equal(again.train_ids, data.train_ids)
    with pytest.raises(ValueError, match="held_out"):
        build_mlm_data(corpus, vocab_size=400, seq_len=32, max_tokens=8000, held_out="middle")


def test_unigram_loss_is_the_cross_entropy_of_token_frequencies():
    import math

    from course_lib.data.text import IGNORE_INDEX, MLMData, SpecialIds

    special = SpecialIds(0, 1, 2, 3, 4)
    train = torch.tensor([[2, 5, 5, 5, 6, 3]])  # counts: 5 three times, 6 once (+1 smoothing on 5..7)
    labels = torch.tensor([[IGNORE_INDEX, 5, 6, IGNORE_INDEX]])
    data = MLMData("t", "t", None, special, vocab_size=8, seq_len=6, train_ids=train, eval_inputs=labels.clone(),
                   eval_labels=labels, num_tokens=6)
    total = 4 + 2 + 1  # smoothed counts of ids 5, 6, 7
    assert data.unigram_loss() == pytest.approx(-(math.log(4 / total) + math.log(2 / total)) / 2)


def test_max_tokens_tokenizes_only_what_it_keeps(cache, monkeypatch):
    """Issue 32: the whole corpus was tokenized into one list before max_tokens applied, on every
    rank (lesson 07 offers WikiText-103). Same tokens as before, a fraction of the documents encoded."""
    monkeypatch.setattr(text, "ENCODE_CHUNK_DOCUMENTS", 16, raising=False)
    docs = tuple(p for d in pydoc_corpus().documents for p in d.split("\n\n") if p.strip())[:2000]
    tok = train_tokenizer(text.Corpus("t", "test", docs[:50]), 400)
    encoded = []

    class Counting:
        def __getattr__(self, name):
            return getattr(tok, name)

        def encode_batch(self, batch, **kw):
            encoded.extend(batch)
            return tok.encode_batch(batch, **kw)

    corpus = text.Corpus("t", "test", docs)
    data = build_mlm_data(corpus, vocab_size=400, seq_len=32, max_tokens=4000, tokenizer=Counting())
    assert len(encoded) % 16 == 0 and len(encoded) < len(docs) / 10  # whole chunks, until 4000 tokens are kept
    assert data.num_tokens == 4000
    reference = build_mlm_data(text.Corpus("t", "test", docs[:len(encoded)]), vocab_size=400, seq_len=32,
                               max_tokens=4000, tokenizer=tok)
    assert torch.equal(reference.train_ids, data.train_ids) and torch.equal(reference.eval_labels, data.eval_labels)
