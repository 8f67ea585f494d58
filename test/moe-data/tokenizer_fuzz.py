"""Seeded mutations of the tokenizer.json files that tokenizers_check.py
trains, each loaded by HF tokenizers (PyPI) and by moe-data tokenize under a
watchdog, and the ids compared document for document.

  tokenizer_fuzz.py DIR --moe-data PATH --seed S --count N [--timeout T]

DIR holds what `tokenizers_check.py train DIR` wrote. A mutation fails when
moe-data crashes (a signal, a sanitizer report, an exit code other than 0
and 1, or an error without moe-data's "moe-data: error:" line), outlives the
watchdog, gives an id that differs from HF's on a file HF loads, or accepts
a file HF refuses (moe-data states no reason for that anywhere, so none is
accepted). Refusing a file HF loads is allowed: moe-data implements a subset
of tokenizer.json, and says so. A file HF loads but fails (panics) encoding
the documents with has no ids to compare; such files are counted. Every failure is printed with its seed and
file; the last line counts them.
"""
import argparse
import copy
import json
import os
import random
import struct
import subprocess
import sys

BASES = ["gpt2", "llama3", "llama2", "metaspace", "nfc", "nfkc"]

# Split regexes: anchors, empty matches, Oniguruma flags, lookaround,
# classes RE2 and Oniguruma read differently, and plain ones.
REGEXES = ["$", "^", "x*", "", "[a-z]+$", "^\\s*[A-Za-z]+", "\\s+", "e.",
           "(?m)e.", "(?s)e.", "(?i)the", "a|", "\\p{L}+|\\p{N}+", "(?=a)",
           "(?<=a)b", "\\Z", "e\\z", "\\Ae", "[[:alpha:]]+", "a{2,}", ".",
           " ?\\p{L}+", "\\s+(?!\\S)|\\s+", "[^\\s\\p{L}]+", "(e)", "$|^",
           "\\n", "(?i:the|and)", "[\\r\\n]+", "\\d+", "\\w+", "\\b", "(",
           "[", "\\p{Han}+", "x*?", "(?:ab)*"]
STRINGS = ["", " ", "e", "the", "\n", "▁", "ab"]
REPLACEMENTS = ["", "▁", "▁▁", "_", " ", "ab", "😀", "\u0301"]
CONTENTS = ["", "a", " ", "the", "<s>", "ab", "\n", "<|endoftext|>", "é",
            "e\u0301", "ﬁ", "<new>", "Ġthe", "▁the", "1"]


def mutate_vocab(spec, rng):
    vocab = spec["model"]["vocab"]
    token = rng.choice(sorted(vocab))
    choice = rng.randrange(8)
    if choice == 0:
        del vocab[token]
    else:
        vocab[token] = rng.choice([2000000000, 2**31 - 1, 2**31, 2**32 - 1, -1,
                                   len(vocab) + 7, vocab[rng.choice(
                                       sorted(vocab))], "7", 1.5, None])


def mutate_merges(spec, rng):
    model = spec["model"]
    merges = model.get("merges", [])
    choice = rng.randrange(7)
    if choice == 0:
        model.pop("merges", None)
    elif choice == 1 and merges:
        del merges[rng.randrange(len(merges))]
    elif choice == 2 and len(merges) > 1:
        i, j = rng.randrange(len(merges)), rng.randrange(len(merges))
        merges[i], merges[j] = merges[j], merges[i]
    elif choice == 3:
        model["merges"] = [" ".join(m) if isinstance(m, list) else m
                           for m in merges]
    elif choice == 4 and merges:
        merges[rng.randrange(len(merges))] = " ".join(merges[0]) \
            if isinstance(merges[0], list) else merges[0].split(" ")
    elif choice == 5:
        model["merges"] = ["#version: 0.2"] + [
            " ".join(m) if isinstance(m, list) else m for m in merges]
    else:
        merges.append(["a", "zzz"])


def mutate_added(spec, rng):
    added = spec.setdefault("added_tokens", [])
    vocab = spec["model"]["vocab"]
    content = rng.choice(CONTENTS + [rng.choice(sorted(vocab))])
    ids = [len(vocab), len(vocab) + 5, 5000, 0, vocab.get(content, 3)]
    token = {"id": rng.choice(ids), "content": content,
             "single_word": rng.random() < 0.3, "lstrip": rng.random() < 0.3,
             "rstrip": rng.random() < 0.3, "normalized": rng.random() < 0.5,
             "special": rng.random() < 0.5}
    if rng.random() < 0.1:
        del token[rng.choice(sorted(token))]
    if rng.random() < 0.05:
        token["special"] = "yes"
    added.insert(rng.randrange(len(added) + 1), token)


def metaspace(rng):
    step = {"type": "Metaspace", "replacement": rng.choice(REPLACEMENTS)}
    if rng.random() < 0.7:
        step["prepend_scheme"] = rng.choice(["first", "always", "never",
                                             "bogus"])
    if rng.random() < 0.4:
        step["add_prefix_space"] = rng.random() < 0.5
    if rng.random() < 0.6:
        step["split"] = rng.random() < 0.5
    return step


def mutate_metaspace(spec, rng):
    if rng.random() < 0.5 or not isinstance(spec.get("decoder"), dict):
        spec["pre_tokenizer"] = metaspace(rng)
    else:
        spec["decoder"] = metaspace(rng)


def split(rng):
    if rng.random() < 0.8:
        pattern = {"Regex": rng.choice(REGEXES)}
    else:
        pattern = {"String": rng.choice(STRINGS)}
    behavior = "Isolated" if rng.random() < 0.9 else rng.choice(
        ["Removed", "MergedWithNext", "Contiguous", "Bogus"])
    return {"type": "Split", "pattern": pattern, "behavior": behavior,
            "invert": rng.random() < 0.05}


def mutate_split(spec, rng):
    byte_level = {"type": "ByteLevel", "add_prefix_space": False,
                  "trim_offsets": True, "use_regex": False}
    if "Ġ" in spec["model"]["vocab"]:
        spec["pre_tokenizer"] = {"type": "Sequence",
                                 "pretokenizers": [split(rng), byte_level]}
    else:
        spec["pre_tokenizer"] = split(rng)


def normalizer(rng, depth=0):
    choice = rng.randrange(9 if depth < 2 else 7)
    if choice < 4:
        return {"type": ["NFC", "NFD", "NFKC", "NFKD"][choice]}
    if choice == 4:
        pattern = ({"Regex": rng.choice(REGEXES)} if rng.random() < 0.6
                   else {"String": rng.choice(STRINGS)})
        return {"type": "Replace", "pattern": pattern,
                "content": rng.choice(["", " ", "▁", "-"])}
    if choice == 5:
        return {"type": "Prepend", "prepend": rng.choice(["▁", "", "x"])}
    if choice == 6:
        return rng.choice([None, {"type": "Lowercase"}, {"type": "NFC",
                                                         "x": 1}])
    return {"type": "Sequence", "normalizers": [
        normalizer(rng, depth + 1) for _ in range(rng.randrange(1, 4))]}


def mutate_normalizer(spec, rng):
    spec["normalizer"] = normalizer(rng)


def mutate_top(spec, rng):
    model = spec["model"]
    choice = rng.randrange(12)
    if choice == 0:
        spec["version"] = rng.choice(["2.0", "1", 1.0, "1.0"])
    elif choice == 1:
        spec.pop("version", None)
    elif choice == 2:
        spec[rng.choice(["extra", "padding", "truncation"])] = {"x": 1}
    elif choice == 3:
        model["type"] = rng.choice(["WordPiece", "Unigram", "bpe"])
    elif choice == 4:
        model["byte_fallback"] = not model.get("byte_fallback")
    elif choice == 5:
        model["unk_token"] = rng.choice([None, "<unk>", "zzz", "a"])
    elif choice == 6:
        model["ignore_merges"] = not model.get("ignore_merges")
    elif choice == 7:
        model["fuse_unk"] = rng.choice([True, False, "yes"])
    elif choice == 8:
        model["dropout"] = rng.choice([0.1, 0.0, None, 2.0])
    elif choice == 9:
        model[rng.choice(["continuing_subword_prefix",
                          "end_of_word_suffix"])] = rng.choice(["##", "", None])
    elif choice == 10:
        model["extra"] = 1
    else:
        spec["post_processor"] = {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<b>", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [], "special_tokens": {"<b>": {
                "id": "<b>", "ids": [rng.choice([0, 1, -1, 2**40])],
                "tokens": ["<b>"]}}}


def nest(text, key, inner_key, depth):
    """`text` with its `key` component wrapped in `depth` Sequences, spelled
    out as text so that Python's recursion limit is no bound."""
    spec = json.loads(text)
    fallback = {"type": "NFC"} if key == "normalizer" else {
        "type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
        "use_regex": True}
    inner = spec.get(key) or fallback
    spec[key] = "@@NESTED@@"
    head = '{"type": "Sequence", "%s": [' % inner_key
    return json.dumps(spec).replace(
        '"@@NESTED@@"', head * depth + json.dumps(inner) + "]}" * depth)


def mutate_text(text, rng):
    choice = rng.randrange(4)
    if choice == 0:
        key, inner_key = rng.choice([("normalizer", "normalizers"),
                                     ("pre_tokenizer", "pretokenizers")])
        return nest(text, key, inner_key,
                    rng.choice([1, 30, 61, 62, 63, 64, 200, 5000]))
    if choice == 1:
        return text[:rng.randrange(len(text))]
    if choice == 2:
        at = rng.randrange(len(text))
        return text[:at] + rng.choice(["{", "[", "\"", "\\", "]", "\x00",
                                       "\\u", "1e999", "-"]) + text[at + 1:]
    at = rng.randrange(len(text))
    return text[:at] + "[" * 200 + text[at:]


MUTATIONS = [mutate_vocab, mutate_merges, mutate_added, mutate_metaspace,
             mutate_split, mutate_normalizer, mutate_top]


def documents(root):
    """A few hundred short documents: paragraphs of the licences, lines of
    the multilingual text, and edge cases."""
    with open(os.path.join(root, "corpus.jsonl"), encoding="utf-8") as f:
        corpus = [json.loads(line)["text"] for line in f if line.strip()]
    with open(os.path.join(root, "multilingual.txt"), encoding="utf-8") as f:
        lines = [l for l in f.read().split("\n") if l.strip()]
    docs = [d[:600] for d in corpus[::4]] + lines[:40] + lines[-40:]
    docs += ["", " ", "\n\n", "a\nb ab", "x", "xx\nxy$", "the<s>the",
             "<|endoftext|>the end", "  lead and trail  ", "e\u0301 é ﬁ ①",
             "ab\nb a\nab", "line one\nline two\n"]
    return docs


def read_megatron(prefix):
    idx = open(prefix + ".idx", "rb").read()
    _, code, count, _ = struct.unpack_from("<QBQQ", idx, 9)
    offset = 9 + 8 + 1 + 8 + 8
    lengths = struct.unpack_from(f"<{count}i", idx, offset)
    pointers = struct.unpack_from(f"<{count}q", idx, offset + 4 * count)
    data = open(prefix + ".bin", "rb").read()
    return [list(struct.unpack_from(f"<{n}q", data, p))
            for n, p in zip(lengths, pointers)]


def hf_ids(text, docs):
    """HF's ids of each document, or why HF refuses the file, or why HF
    fails encoding a document of a file it loads (a Rust panic, such as
    HF's alignments give after some Replace normalizers)."""
    from tokenizers import Tokenizer
    try:
        tok = Tokenizer.from_str(text)
    except BaseException as e:  # a Rust panic is a BaseException
        if isinstance(e, KeyboardInterrupt):
            raise
        return None, f"{type(e).__name__}: {str(e)[:160]}", None
    try:
        return [enc.ids for enc in tok.encode_batch(docs)], None, None
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            raise
        return None, None, f"{type(e).__name__}: {str(e)[:160]}"


def run_one(args, i, docs, docs_path, bases):
    rng = random.Random(args.seed * 1000003 + i)
    name = rng.choice(BASES)
    spec = copy.deepcopy(bases[name])
    ops = []
    for _ in range(rng.randrange(1, 4)):
        op = rng.choice(MUTATIONS)
        op(spec, rng)
        ops.append(op.__name__)
    text = json.dumps(spec, ensure_ascii=rng.random() < 0.5)
    if rng.random() < 0.15:
        text = mutate_text(text, rng)
        ops.append("mutate_text")
    path = os.path.join(args.work, f"m{i}.json")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    label = f"mutation {i} (seed {args.seed}, {name}: {', '.join(ops)}, {path})"
    expected, hf_error, hf_failure = hf_ids(text, docs)
    out = os.path.join(args.work, f"m{i}")
    try:
        run = subprocess.run(
            [args.moe_data, "tokenize", "--tokenizer", path, "--in", docs_path,
             "--out", out, "--format", "megatron", "--dtype", "int64",
             "--threads", "2"], capture_output=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return "fail", f"{label}: no answer within {args.timeout} s"
    stderr = run.stderr.decode("utf-8", "replace")
    if (run.returncode not in (0, 1) or "Sanitizer" in stderr
            or "runtime error:" in stderr):
        return "fail", f"{label}: crashed (exit {run.returncode}): " \
            f"{stderr[-400:]}"
    if run.returncode == 1:
        if not stderr.startswith("moe-data: error: "):
            return "fail", f"{label}: exit 1 without an error: {stderr[:300]}"
        if args.verbose and not hf_error:
            print(f"note: {label}: HF loads it, moe-data says: "
                  f"{stderr.splitlines()[0][:300]}", flush=True)
        return ("refused-both" if hf_error else "refused-moe"), None
    if hf_error:
        # moe-data states no reason for accepting a file HF refuses: any is
        # a failure.
        return "fail", f"{label}: HF refuses it ({hf_error}), moe-data " \
            f"accepts it: {stderr[:300]}"
    if hf_failure:
        # No ids to compare with: HF loads the file and fails on the text.
        print(f"note: {label}: HF fails encoding ({hf_failure}); moe-data "
              "tokenizes it", flush=True)
        return "hf-fails", None
    got = read_megatron(out)
    for d, (g, e) in enumerate(zip(got, expected)):
        if g != e:
            at = next((k for k, (a, b) in enumerate(zip(g, e)) if a != b),
                      min(len(g), len(e)))
            return "fail", f"{label}: document {d} ({docs[d][:60]!r}): ids " \
                f"differ from HF at {at}: {g[at:at + 6]} vs {e[at:at + 6]}"
    if len(got) != len(expected):
        return "fail", f"{label}: {len(got)} documents, HF {len(expected)}"
    for suffix in (".bin", ".idx"):
        os.remove(out + suffix)
    os.remove(path)
    return "same", None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("dir")
    parser.add_argument("--moe-data", required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--timeout", type=float, default=30)
    parser.add_argument("--verbose", action="store_true",
                        help="say why moe-data refuses files HF loads")
    parser.add_argument("--only", type=int,
                        help="run mutation ONLY alone (to reproduce it)")
    args = parser.parse_args()
    args.work = os.path.join(args.dir, "fuzz")
    os.makedirs(args.work, exist_ok=True)
    docs = documents(args.dir)
    docs_path = os.path.join(args.work, "docs.jsonl")
    with open(docs_path, "w", encoding="utf-8") as f:
        for doc in docs:
            f.write(json.dumps({"text": doc}) + "\n")
    bases = {}
    for name in BASES:
        with open(os.path.join(args.dir, name, "tokenizer.json"),
                  encoding="utf-8") as f:
            bases[name] = json.load(f)
    counts = {}
    failures = []
    for i in ([args.only] if args.only is not None else range(args.count)):
        verdict, message = run_one(args, i, docs, docs_path, bases)
        counts[verdict] = counts.get(verdict, 0) + 1
        if message:
            failures.append(message)
            print(message, flush=True)
    print(f"fuzz: {sum(counts.values())} mutations, {len(docs)} documents each: "
          f"{counts.get('same', 0)} same ids as HF, "
          f"{counts.get('refused-both', 0)} refused by both, "
          f"{counts.get('refused-moe', 0)} refused by moe-data only, "
          f"{counts.get('hf-fails', 0)} that HF fails to encode; "
          f"{len(failures)} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
