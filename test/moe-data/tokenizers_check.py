"""Trains small tokenizers with HF tokenizers and sentencepiece (PyPI) on
real English text (the licences in /usr/share/common-licenses), and Unicode
normalizing ones on that and real text in other languages, and checks
moe-data's token datasets against their encoders id for id. Text files are
read as Python reads them with errors="replace", as moe-data does.

  train DIR: writes DIR/<name>/tokenizer.json (or .model), DIR/corpus.jsonl
             and DIR/multilingual.txt
  check TOKENIZER DATASET --inputs FILES... --format F [--append-eos]
  decode TOKENIZER DATASET TEXTFILE [--lossless INPUTS...]
"""
import argparse
import json
import os
import struct
import sys


LICENSES = "/usr/share/common-licenses"
TRAIN = ["GPL-3", "Apache-2.0", "LGPL-2.1", "MPL-1.1", "GFDL-1.3"]
# Held out of training, so that unseen words meet the merges and unseen
# characters the byte fallback.
HELD_OUT = ["Artistic", "BSD", "CC0-1.0", "MPL-2.0", "GPL-2"]
UNICODE_DOC = ("Naïve café owners in Zürich — and 東京 — say “hello” 😀!\n"
               "Tabs\tand  double  spaces,   trailing spaces   \n\n"
               "Numbers 1234567 and 3.14159; it's, we'll, they'RE.\n")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# Real sentences in other languages, with the characters that Unicode
# normalization changes: accents (composed and, below, decomposed),
# ligatures, fullwidth and halfwidth forms, compatibility digits and
# letters, Hangul syllables and jamo.
MULTILINGUAL = """Le cœur a ses raisons que la raison ne connaît point. Où est l'hôtel ?
Über den Wolken muß die Freiheit wohl grenzenlos sein; Straße, Äpfel, Öl.
Tiếng Việt có nhiều dấu: người, được, những, trường, phương.
Ελληνικά: η Ἀθῆναι, ὁ λόγος, ἡ ψυχή, ᾠδή.
Русский язык: ёлка, йод, Щука, съезд.
日本語の文章：東京は日本の首都です。ｶﾀｶﾅ　ｈａｌｆ／ＦＵＬＬ　ｗｉｄｔｈ　１２３！
한국어 문장: 안녕하세요, 세계. ㄱㄴㄷ 가
Ligatures: ﬁnance, ﬂoor, ﬀ, ﬃ, ﬄ, ﬆ; symbols ™ ℃ № ½ ¼ x² H₂O ①②③ Ⅻ ㎏ ㍻.
Español: ¿Dónde está el niño? Año, señor, pingüino.
Português: ação, coração, pão, avô; Polski: źdźbło, żółć, Łódź.
"""
MAN_PAGES = "/usr/share/man"
MAN_LANGUAGES = ["fr", "de", "es", "it", "pl", "pt", "ru", "ja", "ko", "sv",
                 "cs", "hu", "tr"]
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|"
                r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def train(out):
    from tokenizers import (Regex, Tokenizer, decoders, models, normalizers,
                            pre_tokenizers, processors, trainers)
    import sentencepiece as spm
    files = [os.path.join(LICENSES, f) for f in TRAIN]

    def save(tok, name):
        os.makedirs(os.path.join(out, name), exist_ok=True)
        tok.save(os.path.join(out, name, "tokenizer.json"))

    # GPT-2 style byte-level BPE.
    for name, prefix, special in [("gpt2", False, ["<|endoftext|>"]),
                                  ("gpt2-prefix", True, [])]:
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=prefix)
        tok.decoder = decoders.ByteLevel()
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
        tok.train(files, trainers.BpeTrainer(
            vocab_size=1500, special_tokens=special, show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
        save(tok, name)

    # Llama 3 style: Split(regex) then ByteLevel without its regex,
    # ignore_merges, and a bos template.
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train(files, trainers.BpeTrainer(
        vocab_size=2000, show_progress=False,
        special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(
            single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A $B",
            special_tokens=[("<|begin_of_text|>", bos)])])
    save(tok, "llama3")

    # Llama 2 style: SentencePiece BPE in a tokenizer.json with byte
    # fallback and <0x00>..<0xFF> in the model's vocabulary. A limited
    # alphabet leaves rare characters to the byte fallback.
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True,
                               fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"),
                                           normalizers.Replace(" ", "▁")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first",
                                                 split=False)
    tok.train(files, trainers.BpeTrainer(
        vocab_size=1200, limit_alphabet=70, show_progress=False,
        special_tokens=["<unk>", "<s>", "</s>"]))
    spec = json.loads(tok.to_str())
    learned = sorted(spec["model"]["vocab"].items(), key=lambda kv: kv[1])
    vocab = {t: i for t, i in learned if i < 3}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for t, _ in learned:
        if t not in vocab:
            vocab[t] = len(vocab)
    spec["model"]["vocab"] = vocab
    for added in spec["added_tokens"]:
        added["id"] = vocab[added["content"]]
    spec["pre_tokenizer"] = None
    spec["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    spec["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                 {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [vocab["<s>"]],
                                   "tokens": ["<s>"]}}}
    llama2 = Tokenizer.from_str(json.dumps(spec))
    save(llama2, "llama2")
    # The newer spelling of the same: Metaspace pre-tokenizer and decoder.
    spec["normalizer"] = None
    spec["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁",
                             "prepend_scheme": "first", "split": False}
    spec["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
         "split": False}, {"type": "ByteFallback"}, {"type": "Fuse"}]}
    save(Tokenizer.from_str(json.dumps(spec)), "metaspace")

    # A SentencePiece model trained by sentencepiece itself.
    os.makedirs(os.path.join(out, "spm"), exist_ok=True)
    spm.SentencePieceTrainer.train(
        input=",".join(files), model_prefix=os.path.join(out, "spm", "m"),
        vocab_size=1000, model_type="bpe", byte_fallback=True,
        character_coverage=0.995, minloglevel=2)

    # Qwen2's pipeline (its tokenizer.json has an NFC normalizer) with each
    # of the four normalization forms, trained on English and other
    # languages, so that merges span accented and wide characters.
    text = multilingual_text()
    with open(os.path.join(out, "multilingual.txt"), "w",
              encoding="utf-8") as f:
        f.write(text)
    forms = {"nfc": normalizers.NFC(), "nfd": normalizers.NFD(),
             "nfkd": normalizers.NFKD(),
             "nfkc": normalizers.Sequence([
                 normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")])}
    for name, normalizer in forms.items():
        tok = Tokenizer(models.BPE())
        tok.normalizer = normalizer
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tok.decoder = decoders.ByteLevel()
        tok.train_from_iterator(
            [open(f, encoding="utf-8").read() for f in files] + [text],
            trainers.BpeTrainer(
                vocab_size=3000, show_progress=False,
                special_tokens=["<|endoftext|>"],
                initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
        save(tok, name)

    with open(os.path.join(out, "unicode.txt"), "w", encoding="utf-8") as f:
        f.write(UNICODE_DOC)
    with open(os.path.join(out, "corpus.jsonl"), "w", encoding="utf-8") as f:
        for name in TRAIN + HELD_OUT:
            with open(os.path.join(LICENSES, name), encoding="utf-8") as text:
                for paragraph in split_paragraphs(text.read()):
                    f.write(json.dumps({"text": paragraph}) + "\n")
        f.write(json.dumps({"text": UNICODE_DOC}) + "\n")


def multilingual_text():
    """MULTILINGUAL, its NFD and NFKD spellings, and the text of the
    localized man pages of a few base packages where they are installed
    (groff requests left out)."""
    import glob
    import gzip
    import unicodedata
    parts = [MULTILINGUAL, unicodedata.normalize("NFD", MULTILINGUAL),
             unicodedata.normalize("NFKD", MULTILINGUAL)]
    for lang in MAN_LANGUAGES:
        for page in sorted(glob.glob(f"{MAN_PAGES}/{lang}/man1/*.1.gz"))[:3]:
            with gzip.open(page, "rt", encoding="utf-8", errors="replace") as f:
                lines = [l for l in f.read().splitlines()
                         if l and not l.startswith((".", "'"))]
            parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)


def split_paragraphs(text):
    """moe-data's rule: a paragraph ends after a run of two or more
    newlines; the last takes what remains."""
    pieces, begin, i = [], 0, 0
    while i < len(text):
        if text[i] != "\n":
            i += 1
            continue
        run = i
        while run < len(text) and text[run] == "\n":
            run += 1
        if run - i >= 2:
            pieces.append(text[begin:run])
            begin = run
        i = run
    if begin < len(text):
        pieces.append(text[begin:])
    return pieces


def documents(inputs, fmt):
    docs = []
    for path in inputs:
        with open(path, encoding="utf-8", errors="replace") as f:
            if path.endswith(".jsonl"):
                docs += [json.loads(line)["text"] for line in f if line.strip()]
            elif fmt == "megatron":
                docs += split_paragraphs(f.read())
            else:
                docs.append(f.read())
    return docs


class Encoder:
    def __init__(self, path):
        with open(path, "rb") as f:
            is_json = f.read(64).lstrip().startswith((b"{", b"["))
        if not is_json:
            import sentencepiece as spm
            self.sp = spm.SentencePieceProcessor(model_file=path)
            self.eos = self.sp.eos_id()
            self.tok = None
        else:
            from tokenizers import Tokenizer
            self.tok = Tokenizer.from_file(path)
            names = ["</s>", "<|end_of_text|>", "<|endoftext|>"]
            ids = [self.tok.token_to_id(n) for n in names]
            self.eos = next((i for i in ids if i is not None), None)

    def encode(self, text):
        if self.tok is None:
            return self.sp.encode(text)
        return self.tok.encode(text).ids

    def decode(self, ids):
        if self.tok is None:
            return self.sp.decode(ids)
        return self.tok.decode(ids)


# Megatron dtype codes as struct formats.
DTYPES = {1: "B", 2: "b", 3: "h", 4: "i", 5: "q", 8: "H"}


def unpack(fmt, data, count, offset):
    return list(struct.unpack_from(f"<{count}{fmt}", data, offset))


def read_dataset(path):
    """The documents of a Megatron dataset (PREFIX.idx exists), or the one
    stream of a flat uint16 file."""
    if not os.path.exists(path + ".idx"):
        data = open(path, "rb").read()
        return [unpack("H", data, len(data) // 2, 0)]
    idx = open(path + ".idx", "rb").read()
    assert idx[:9] == b"MMIDIDX\0\0", "not a megatron index"
    _, code, count, doc_count = struct.unpack_from("<QBQQ", idx, 9)
    offset = 9 + 8 + 1 + 8 + 8
    lengths = unpack("i", idx, count, offset)
    pointers = unpack("q", idx, count, offset + 4 * count)
    data = open(path + ".bin", "rb").read()
    return [unpack(DTYPES[code], data, n, p) for n, p in zip(lengths, pointers)]


def check(args):
    enc = Encoder(args.tokenizer)
    docs = documents(args.inputs, args.format)
    expected = []
    for doc in docs:
        ids = enc.encode(doc)
        if args.append_eos:
            ids = ids + [enc.eos]
        expected.append(ids)
    got = read_dataset(args.dataset)
    if args.format == "flat":
        expected = [[i for ids in expected for i in ids]]
    if len(got) != len(expected):
        sys.exit(f"{len(got)} documents, expected {len(expected)}")
    tokens = 0
    for d, (g, e) in enumerate(zip(got, expected)):
        if g != e:
            at = next((i for i, (a, b) in enumerate(zip(g, e)) if a != b),
                      min(len(g), len(e)))
            sys.exit(f"document {d}: ids differ from HF at {at}: "
                     f"got {g[at:at + 8]}, expected {e[at:at + 8]} "
                     f"(text {docs[min(d, len(docs) - 1)][:80]!r})")
        tokens += len(g)
    print(f"same ids: {len(got)} documents, {tokens} tokens")


def decode(args):
    enc = Encoder(args.tokenizer)
    got = open(args.text, encoding="utf-8", errors="surrogateescape").read()
    expected = "".join(enc.decode(ids) for ids in read_dataset(args.dataset))
    if got != expected:
        at = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b),
                  min(len(got), len(expected)))
        sys.exit(f"text differs from HF's decode at {at}: "
                 f"{got[at:at + 40]!r} vs {expected[at:at + 40]!r}")
    if args.lossless:
        original = "".join(documents(args.lossless, "megatron"))
        if got != original:
            sys.exit("text differs from the original")
    print(f"same text: {len(got)} characters")


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("train")
    p.add_argument("out")
    p = sub.add_parser("check")
    p.add_argument("tokenizer")
    p.add_argument("dataset")
    p.add_argument("--inputs", nargs="+", required=True)
    p.add_argument("--format", choices=["flat", "megatron"], required=True)
    p.add_argument("--append-eos", action="store_true")
    p = sub.add_parser("decode")
    p.add_argument("tokenizer")
    p.add_argument("dataset")
    p.add_argument("text")
    p.add_argument("--lossless", nargs="+")
    args = parser.parse_args()
    if args.command == "train":
        train(args.out)
    elif args.command == "check":
        check(args)
    else:
        decode(args)


if __name__ == "__main__":
    main()
