#!/usr/bin/env python3
"""Seeded mutations of HF config.json files through moe-import (issue 45).

Each mutant is one config with one to three mutations: a field's value of
another type (null, a string, a list, an object, a float), a huge, negative
or zero number, a removed field, an unknown (or huge) key, a duplicated key,
deep nesting, a number Python's json refuses, truncated text, invalid UTF-8.
Every mutant runs through `moe-import hf` under a watchdog. The pass rule:

* no crash: the exit status is 0 or 1, and stderr has no "LLVM ERROR",
  "Assertion", "Stack dump", "terminate called" or sanitizer report;
* no hang: it ends within --timeout seconds;
* a refusal is clear: every stderr line is "moe-import: error: " or
  "moe-import: note: ", at most 4096 characters (values are cut), and every
  error names the file, then either a position (LINE:COLUMN) or an HF field
  (field '...') or a flag (--...); the dialect verifier's own words (moec's
  attribute names) are a failure;
* nothing HF refuses is accepted: a mutant whose text Python's json refuses
  (json.loads is HF's reader), or that gives an integer field a value of
  another type, or adds an unknown key, must be refused; with --hf-python
  (a Python with transformers), every accepted mutant must also load in
  HF's config class (hf_config_check.py).

Python's standard library only, so it runs wherever the tests do. Prints one
summary line per config and, for each failure, the mutations and what broke,
keeping the mutant under --keep.
"""
import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile

# Integer fields of the three architectures (any of them a mutant may hit):
# a value of another type must be refused.
INTEGER_FIELDS = {
    "vocab_size", "hidden_size", "intermediate_size", "moe_intermediate_size",
    "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "num_experts_per_tok", "num_local_experts", "num_experts",
    "n_routed_experts", "n_shared_experts", "n_group", "topk_group",
    "first_k_dense_replace", "kv_lora_rank", "q_lora_rank",
    "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "head_dim",
    "decoder_sparse_step", "max_position_embeddings",
    "num_nextn_predict_layers",
}
# Fields whose null HF reads as unset (moe-import takes null there).
NULLABLE = {
    "bos_token_id", "eos_token_id", "pad_token_id", "q_lora_rank",
    "num_key_value_heads", "head_dim", "qk_head_dim", "sliding_window",
    "mlp_only_layers", "max_window_layers", "rope_parameters", "rope_scaling",
    "quantization_config", "torch_dtype", "dtype", "transformers_version",
    "auto_map", "_name_or_path", "architectures", "model_type",
    "id2label", "label2id", "return_dict", "output_attentions",
    "output_hidden_states", "problem_type", "chunk_size_feed_forward",
    "is_encoder_decoder",
}
CRASH_MARKERS = ("LLVM ERROR", "Assertion", "Stack dump", "terminate called",
                 "AddressSanitizer", "UndefinedBehaviorSanitizer",
                 "LeakSanitizer", "runtime error:", "Segmentation fault")
ODD_VALUES = [None, True, False, "1", "abc", [], [32], {}, {"a": 1}, 1.5,
              32.0, -1, 0, 1, 2**31, 2**31 - 1, 2**32, 2**63 - 1, 2**63,
              2**64, 9223372036854775807, -2**63, 1e308, -1e308, 1e-320,
              0.0, -0.0]
BAD_NUMBERS = ["+32", "032", ".5", "1.", "0x10", "1e", "--1", "NaN",
               "Infinity", "-Infinity", "1e400", "00", "-", "1_000"]


def forget(must_refuse, key, removed=False):
    """Drops the reasons to refuse that an earlier mutation of `key`'s value
    gave (an unknown key stays unknown until it is removed)."""
    must_refuse[:] = [entry for entry in must_refuse
                      if entry[0] != key or
                      (entry[1] == "an unknown key" and not removed)]


def mutate_value(rng, config, notes, must_refuse):
    """A field's value replaced by one of another type or size."""
    key = rng.choice(sorted(config))
    forget(must_refuse, key)
    value = rng.choice(ODD_VALUES + ["x" * rng.choice([65, 100000])])
    old = config[key]
    config[key] = value
    notes.append(f"{key}: {json.dumps(old)[:40]} -> {json.dumps(value)[:40]}")
    if key in INTEGER_FIELDS and (isinstance(value, (bool, str, list, dict,
                                                     float))
                                  or (value is None and key not in NULLABLE)):
        must_refuse.append((key, f"{key} is not an integer"))
    if value is None and key not in NULLABLE and old is not None:
        must_refuse.append((key, f"{key} is null"))


def mutate_number(rng, config, notes, must_refuse):
    """A numeric field scaled far out, negated or zeroed."""
    numeric = sorted(k for k, v in config.items()
                     if isinstance(v, (int, float)) and not isinstance(v, bool))
    if not numeric:
        return
    key = rng.choice(numeric)
    forget(must_refuse, key)
    old = config[key]
    value = rng.choice([old * 2**rng.randint(8, 40), -old, 0, old + 1,
                        old - 1, 2147483648, old * 1.5])
    if isinstance(old, int) and isinstance(value, float) and value.is_integer():
        value = int(value)
    config[key] = value
    notes.append(f"{key}: {old} -> {value}")
    if key in INTEGER_FIELDS and isinstance(value, float):
        must_refuse.append((key, f"{key} is a float"))


def mutate_remove(rng, config, notes, must_refuse):
    key = rng.choice(sorted(config))
    forget(must_refuse, key, removed=True)
    del config[key]
    notes.append(f"{key} removed")


def mutate_unknown(rng, config, notes, must_refuse):
    key = rng.choice(["rope_mystery", "k" * 100, "k" * 1000000, "",
                      "hidden size", "num_hidden_layers "])
    config[key] = rng.choice(ODD_VALUES[:8])
    notes.append(f"unknown key of {len(key)} bytes")
    must_refuse.append((key, "an unknown key"))


def mutate_nested(rng, config, notes, must_refuse):
    """A mutation inside an object-valued field (rope_parameters ...)."""
    objects = sorted(k for k, v in config.items() if isinstance(v, dict) and v)
    if not objects:
        return mutate_value(rng, config, notes, must_refuse)
    key = rng.choice(objects)
    inner = rng.choice(sorted(config[key]))
    forget(must_refuse, key)
    config[key][inner] = rng.choice(ODD_VALUES)
    notes.append(f"{key}.{inner} -> {json.dumps(config[key][inner])[:40]}")


FIELD_MUTATIONS = [mutate_value, mutate_value, mutate_number, mutate_number,
                   mutate_remove, mutate_unknown, mutate_nested]


def text_mutation(rng, text, notes, must_refuse):
    """A mutation of the text itself; all but the last are JSON Python's
    json refuses."""
    kind = rng.randrange(6)
    if kind == 0:
        depth = rng.choice([600, 20000, 50000])
        notes.append(f"nesting {depth} deep")
        must_refuse.append((None, "deep nesting"))
        return text.replace("{", "{\"deep\": " + "[" * depth + "]" * depth +
                            ",", 1)
    if kind == 1:
        numbers = list(re.finditer(r"(?<=: )-?[0-9][0-9.eE+-]*", text))
        if numbers:
            match = rng.choice(numbers)
            bad = rng.choice(BAD_NUMBERS)
            notes.append(f"number {match.group()} -> {bad}")
            if bad != "1e400":  # Python reads 1e400 as inf: a range error
                must_refuse.append((None, "an invalid JSON number"))
            return text[:match.start()] + bad + text[match.end():]
    if kind == 2:
        cut = rng.randrange(1, len(text) - 1)
        notes.append(f"truncated at byte {cut}")
        must_refuse.append((None, "truncated JSON"))
        return text[:cut]
    if kind == 3:
        notes.append("a key given twice")
        must_refuse.append((None, "a duplicated key"))
        first = re.search(r'"([a-z_]+)": ', text)
        return text.replace("{", "{" + first.group(0) + "4, ", 1)
    if kind == 4:
        notes.append("invalid UTF-8 in a string")
        must_refuse.append((None, "invalid UTF-8"))
        return text.replace('"silu"', '"si\udcffu"', 1).replace(
            '"model_type"', '"model_type\udcfe"', 1)
    notes.append("trailing comma")
    must_refuse.append((None, "a trailing comma"))
    return text.rstrip().rstrip("}").rstrip() + ",}"


def check_output(path, result, must_refuse):
    """The pass rule on one run; returns what broke, or None."""
    stderr = result.stderr
    for marker in CRASH_MARKERS:
        if marker in stderr:
            return f"crash: {marker}"
    if result.returncode not in (0, 1):
        return f"crash: exit status {result.returncode}"
    if result.returncode == 0:
        if must_refuse:
            return "accepted although " + "; ".join(
                why for _, why in must_refuse)
        return None
    errors = 0
    for line in stderr.splitlines():
        if len(line) > 4096:
            return f"a line of {len(line)} characters (values are not cut)"
        if line.startswith("moe-import: note: "):
            continue
        if not line.startswith("moe-import: error: "):
            return f"not an error line: {line[:200]}"
        errors += 1
        rest = line[len("moe-import: error: "):]
        if not rest.startswith(path):
            return f"the error does not name the file: {line[:200]}"
        rest = rest[len(path):]
        if not re.match(r"(:[0-9]+:[0-9]+: |: field '|: --)", rest):
            return f"the error names no position, field or flag: {line[:300]}"
    if errors == 0:
        return "refused without an error"
    return None


def check_with_hf(args, descriptions):
    """Failures among the accepted mutants that HF's config class refuses."""
    checker = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                           "hf_config_check.py")
    command = [args.hf_python, checker]
    for field in args.ignore:
        command += ["--drop", field]
    result = subprocess.run(command + sorted(descriptions),
                            capture_output=True, text=True, check=True)
    failures = 0
    for line in result.stdout.splitlines():
        path, verdict, *why = line.split("\t")
        if verdict != "ok":
            failures += 1
            print(f"FAIL {descriptions[path]}: accepted although HF refuses "
                  f"it: {why[0] if why else ''}")
    print(f"HF's config classes: {len(descriptions)} accepted mutants "
          f"checked, {failures} refused by HF")
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tool", required=True, help="the moe-import binary")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--mutants", type=int, default=100,
                        help="mutants per config")
    parser.add_argument("--timeout", type=float, default=20.0)
    parser.add_argument("--ignore", action="append", default=[],
                        help="passed to moe-import as --ignore FIELD")
    parser.add_argument("--keep", help="directory for failing mutants")
    parser.add_argument("--hf-python",
                        help="a Python with transformers: accepted mutants "
                             "must load in HF's config class too")
    parser.add_argument("configs", nargs="+")
    args = parser.parse_args()

    failures = 0
    work = tempfile.mkdtemp(prefix="fuzz-import-")
    accepted = os.path.join(work, "accepted")
    os.makedirs(accepted)
    descriptions = {}
    try:
        for config_path in args.configs:
            with open(config_path, encoding="utf-8") as f:
                original = json.load(f)
            name = os.path.basename(config_path)
            counts = {"accepted": 0, "refused": 0}
            for index in range(args.mutants):
                rng = random.Random(f"{args.seed}:{name}:{index}")
                config = json.loads(json.dumps(original))
                notes, must_refuse = [], []
                for _ in range(rng.choice([1, 1, 1, 2, 3])):
                    rng.choice(FIELD_MUTATIONS)(rng, config, notes,
                                                must_refuse)
                text = json.dumps(config, indent=2)
                if rng.random() < 0.25:
                    text = text_mutation(rng, text, notes, must_refuse)
                path = os.path.join(work, f"{name}.{index}.json")
                with open(path, "w", encoding="utf-8",
                          errors="surrogateescape") as f:
                    f.write(text)
                command = [args.tool, "hf", path, "-o",
                           os.path.join(work, "out.mlir"), "--batch", "2",
                           "--seq", "16"]
                for field in args.ignore:
                    command += ["--ignore", field]
                try:
                    result = subprocess.run(command, capture_output=True,
                                            text=True, errors="replace",
                                            timeout=args.timeout)
                    problem = check_output(path, result, must_refuse)
                except subprocess.TimeoutExpired:
                    problem = f"hang: still running after {args.timeout} s"
                    result = None
                if problem is None:
                    counts["accepted" if result.returncode == 0
                           else "refused"] += 1
                    if result.returncode == 0 and args.hf_python:
                        kept = os.path.join(accepted, os.path.basename(path))
                        os.replace(path, kept)
                        descriptions[kept] = f"{name} mutant {index} " \
                                             f"({'; '.join(notes)})"
                    else:
                        os.remove(path)
                    continue
                failures += 1
                print(f"FAIL {name} mutant {index} ({'; '.join(notes)}): "
                      f"{problem}")
                if args.keep:
                    os.makedirs(args.keep, exist_ok=True)
                    shutil.copy(path, args.keep)
                os.remove(path)
            print(f"{name}: {args.mutants} mutants: {counts['accepted']} "
                  f"accepted, {counts['refused']} refused")
        if args.hf_python and descriptions:
            failures += check_with_hf(args, descriptions)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if failures:
        print(f"fuzz_import: {failures} failures")
        return 1
    print("fuzz_import: every mutant passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
