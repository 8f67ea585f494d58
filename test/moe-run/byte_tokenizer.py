#!/usr/bin/env python3
"""Writes a tokenizer.json whose ids are the bytes themselves (the ids
moe-data tokenize writes without a tokenizer): byte-level BPE with GPT-2's
byte-to-character map, id b for byte b, no merges."""
import json
import sys


def bytes_to_unicode():
    printable = (list(range(ord("!"), ord("~") + 1)) +
                 list(range(ord("¡"), ord("¬") + 1)) +
                 list(range(ord("®"), ord("ÿ") + 1)))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


chars = bytes_to_unicode()
tokenizer = {
    "version": "1.0",
    "truncation": None,
    "padding": None,
    "added_tokens": [],
    "normalizer": None,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False,
                      "trim_offsets": True, "use_regex": True},
    "post_processor": None,
    "decoder": {"type": "ByteLevel", "add_prefix_space": False,
                "trim_offsets": True, "use_regex": True},
    "model": {"type": "BPE", "dropout": None, "unk_token": None,
              "continuing_subword_prefix": None, "end_of_word_suffix": None,
              "fuse_unk": False, "byte_fallback": False,
              "vocab": {chars[b]: b for b in range(256)}, "merges": []},
}
with open(sys.argv[1], "w") as f:
    json.dump(tokenizer, f, ensure_ascii=False)
