"""The hostile tokenizer.json files of issue 45, made from the ones that
tokenizers_check.py trains, and what HF tokenizers (PyPI) makes of them.

  make DIR: writes DIR/hostile/<case>.json from DIR/<name>/tokenizer.json
  hf FILE [TEXT]: prints "hf: loads" and, with TEXT, HF's ids of it, or
                  "hf: refuses: <HF's error>"
"""
import json
import os
import sys

# 30,000 Sequences: far past HF's limit (JSON nested deeper than 127).
DEEP = 30000
# The deepest Sequence of normalizers HF reads (the JSON is then 126 deep),
# and one more.
HF_DEEPEST = 62


def load(root, name):
    with open(os.path.join(root, name, "tokenizer.json"), encoding="utf-8") as f:
        return json.load(f)


def nested(spec, key, inner_key, inner, depth):
    """`spec` with `key` set to `inner` in `depth` Sequences, spelled out as
    text (Python's json recurses)."""
    spec = dict(spec, **{key: "@@NESTED@@"})
    head = '{"type": "Sequence", "%s": [' % inner_key
    return json.dumps(spec).replace(
        '"@@NESTED@@"', head * depth + json.dumps(inner) + "]}" * depth)


def split_then_bytes(regex):
    return {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated",
         "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
         "use_regex": False}]}


def make(root):
    out = os.path.join(root, "hostile")
    os.makedirs(out, exist_ok=True)

    def write(name, spec):
        with open(os.path.join(out, name + ".json"), "w", encoding="utf-8") as f:
            f.write(spec if isinstance(spec, str) else json.dumps(spec))

    metaspace = load(root, "metaspace")
    gpt2 = load(root, "gpt2")
    for name, replacement in [("metaspace-empty", ""),
                              ("metaspace-two", "▁▁")]:
        spec = json.loads(json.dumps(metaspace))
        spec["pre_tokenizer"]["replacement"] = replacement
        write(name, spec)
    spec = json.loads(json.dumps(metaspace))
    spec["decoder"]["decoders"][0]["replacement"] = ""
    write("metaspace-decoder-empty", spec)
    spec = json.loads(json.dumps(metaspace))
    del spec["pre_tokenizer"]["prepend_scheme"]
    spec["pre_tokenizer"]["add_prefix_space"] = False
    write("metaspace-no-prefix", spec)

    # A vocabulary id of 2000000000 (the token "the", which merges make).
    spec = json.loads(json.dumps(gpt2))
    spec["model"]["vocab"]["the"] = 2000000000
    write("huge-id", spec)

    # An added token whose content model.vocab has under another id.
    spec = json.loads(json.dumps(gpt2))
    spec["added_tokens"].append({
        "id": len(spec["model"]["vocab"]), "content": "a",
        "single_word": False, "lstrip": False, "rstrip": False,
        "normalized": False, "special": False})
    write("added-in-vocab", spec)

    for name, key, inner_key, inner in [
            ("normalizer", "normalizer", "normalizers", {"type": "NFC"}),
            ("pre-tokenizer", "pre_tokenizer", "pretokenizers",
             gpt2["pre_tokenizer"])]:
        write(f"deep-{name}", nested(gpt2, key, inner_key, inner, DEEP))
        write(f"deepest-{name}",
              nested(gpt2, key, inner_key, inner, HF_DEEPEST))
        write(f"too-deep-{name}",
              nested(gpt2, key, inner_key, inner, HF_DEEPEST + 1))

    # `$` and `^` are line anchors in Oniguruma; `x*` matches empty text.
    for name, regex in [("dollar", "[a-z]+$"), ("caret", "^[A-Za-z]+"),
                        ("empty-match", "x*"), ("dotall", "(?m)e.")]:
        spec = json.loads(json.dumps(gpt2))
        spec["pre_tokenizer"] = split_then_bytes(regex)
        write(name, spec)
    spec = json.loads(json.dumps(gpt2))
    spec["pre_tokenizer"] = split_then_bytes("(?s)e.")
    write("flag-s", spec)

    spec = json.loads(json.dumps(gpt2))
    spec["version"] = "2.0"
    write("version-2", spec)
    spec = json.loads(json.dumps(gpt2))
    del spec["model"]["merges"]
    write("no-merges", spec)
    spec = json.loads(json.dumps(gpt2))
    spec["model"]["merges"][0] = " ".join(spec["model"]["merges"][0])
    write("mixed-merges", spec)
    spec = json.loads(json.dumps(gpt2))
    del spec["added_tokens"][0]["special"]
    write("added-no-special", spec)


def hf(path, text):
    from tokenizers import Tokenizer
    try:
        tok = Tokenizer.from_file(path)
    except Exception as e:
        print(f"hf: refuses: {e}")
        return
    print("hf: loads")
    if text is not None:
        print("hf ids:", ",".join(map(str, tok.encode(text).ids)))


def main():
    if sys.argv[1] == "make":
        make(sys.argv[2])
    else:
        hf(sys.argv[2], sys.argv[3].encode().decode("unicode_escape")
           if len(sys.argv) > 3 else None)


if __name__ == "__main__":
    main()
