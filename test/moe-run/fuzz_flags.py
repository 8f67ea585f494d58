#!/usr/bin/env python3
"""Seeded mutations of moe-run generate and --eval-data command lines
(test/moe-run/flags-fuzz.test, issue 45).

  fuzz_flags.py --seed S --runs N MOE_RUN WORK

WORK holds a trained tiny model: tiny.moebin, tiny.safetensors (its
weights), train.bin and heldout.bin (uint16 token files). Each run starts
from a valid command line and applies one or two mutations: a number at
the edges (0, -1, 2^63 - 1, 2^63, 1e9, 0x10, "", words), a flag repeated,
dropped, left without its value or unknown, an input that is a directory, a
FIFO, an empty, truncated or missing file or a symlink loop, and an output
that is an input. Every run has a watchdog. The pass rule:

  * no crash: the exit code is 0, 1 (an error) or 2 (bad usage), and no
    sanitizer report;
  * no hang: every run ends within the watchdog;
  * an error is one line, "moe-run: error: ...", naming a flag or a file of
    the command line;
  * no input changes: the files a run reads are as they were after it.

Prints one summary line per command, then "every check held", or each
failure with its command line (exit status 1).
"""
import argparse
import hashlib
import os
import random
import shutil
import subprocess
import sys

WATCHDOG_S = 60
# --show: print each error line (to read what the refusals say).
SHOW = False

EDGE_NUMBERS = ["0", "-1", "1", "2", "3", "1", "2", "9223372036854775807",
                "9223372036854775808", "-9223372036854775808",
                "99999999999999999999", "1e9", "1000000000", "0x10", "",
                " ", "abc", "1.5", "+1", "-0", "inf", "nan", "2147483648",
                "1,2", "٣"]
EDGE_PROMPTS = ["", ",", "1,,2", "-1", "256", "255", "99999999999999999999",
                "1,2,", "0", "1 2", "a", ",".join(["5"] * 70)]
UNKNOWN_FLAGS = ["--frobnicate", "--max_new", "-x", "--", "-", "--top-p",
                 "--eval-data=x"]


def digest(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


class Fixtures:
    """The model's files, and hostile files beside them."""

    def __init__(self, work):
        self.work = os.path.abspath(work)
        work = self.work
        self.artifact = os.path.join(work, "tiny.moebin")
        self.weights = os.path.join(work, "tiny.safetensors")
        self.train = os.path.join(work, "train.bin")
        self.heldout = os.path.join(work, "heldout.bin")
        self.inputs = [self.artifact, self.weights, self.train, self.heldout]
        self.digests = {p: digest(p) for p in self.inputs}
        hostile = os.path.join(work, "hostile")
        shutil.rmtree(hostile, ignore_errors=True)
        os.makedirs(os.path.join(hostile, "dir"))
        self.hostile = hostile
        self.dir = os.path.join(hostile, "dir")
        self.fifo = os.path.join(hostile, "fifo")
        os.mkfifo(self.fifo)
        self.empty = os.path.join(hostile, "empty")
        open(self.empty, "wb").close()
        self.loop = os.path.join(hostile, "loop")
        os.symlink(os.path.join(hostile, "loop2"), self.loop)
        os.symlink(self.loop, os.path.join(hostile, "loop2"))
        self.missing = os.path.join(hostile, "missing")
        # Copies cut short, and an odd number of bytes for uint16 ids.
        self.truncated = {}
        for path in self.inputs:
            data = open(path, "rb").read()
            cut = os.path.join(hostile, "cut-" + os.path.basename(path))
            open(cut, "wb").write(data[: len(data) // 2 + 1])
            self.truncated[path] = cut
        # A directory checkpoint whose model.safetensors is hostile.
        self.checkpoints = []
        for kind in ["fifo", "dir", "loop", "index-dir"]:
            ckpt = os.path.join(hostile, "ckpt-" + kind)
            os.makedirs(ckpt)
            name = os.path.join(ckpt, "model.safetensors")
            if kind == "fifo":
                os.mkfifo(name)
            elif kind == "dir":
                os.makedirs(name)
            elif kind == "loop":
                os.symlink(name, name)
            else:
                os.makedirs(os.path.join(ckpt, "model.safetensors.index.json"))
            self.checkpoints.append(ckpt)

    def hostile_inputs(self, original):
        files = [self.dir, self.fifo, self.empty, self.loop, self.missing,
                 self.hostile + "/dir/../fifo"]
        if original in self.truncated:
            files.append(self.truncated[original])
        return files

    def changed(self):
        return [p for p in self.inputs
                if not os.path.isfile(p) or digest(p) != self.digests[p]]

    def restore(self, clean):
        for path in self.inputs:
            shutil.copyfile(os.path.join(clean, os.path.basename(path)), path)


def flag_values(args):
    """Indices of the values of flags (args[i] = "--x", args[i+1] its value)."""
    return [i + 1 for i in range(len(args) - 1)
            if args[i].startswith("--") and not args[i + 1].startswith("--")]


def mutate(args, rng, fx, numeric, paths, outputs):
    args = list(args)
    kind = rng.choice(["number", "number", "number", "repeat", "drop",
                       "no-value", "unknown", "file", "file", "output",
                       "prompt", "dtype"])
    flags = [i for i in range(len(args)) if args[i].startswith("--")]
    if kind == "number":
        candidates = [i for i in flags if args[i] in numeric]
        flag = rng.choice(numeric)
        value = rng.choice(EDGE_NUMBERS)
        hits = [i for i in candidates if args[i] == flag]
        if hits:
            args[hits[0] + 1] = value
        else:
            args += [flag, value]
    elif kind == "repeat" and flags:
        i = rng.choice(flags)
        has_value = i + 1 < len(args) and not args[i + 1].startswith("--")
        args += args[i:i + 2] if has_value else [args[i]]
    elif kind == "drop" and flags:
        i = rng.choice(flags)
        has_value = i + 1 < len(args) and not args[i + 1].startswith("--")
        del args[i:i + (2 if has_value else 1)]
    elif kind == "no-value":
        args.append(rng.choice(numeric + paths[:-1] + outputs))
    elif kind == "unknown":
        args.insert(rng.randrange(2, len(args) + 1), rng.choice(UNKNOWN_FLAGS))
    elif kind == "file":
        flag = rng.choice(paths)
        if flag == "the artifact":
            where = 2 if args[1] == "generate" else 1
            args[where] = rng.choice(fx.hostile_inputs(fx.artifact))
            return args
        where = [i for i in flags if args[i] == flag]
        original = args[where[0] + 1] if where else ""
        choices = fx.hostile_inputs(original)
        if flag == "--load":
            choices += fx.checkpoints + [fx.weights + ".index.json"]
        value = rng.choice(choices)
        if where:
            args[where[0] + 1] = value
        else:
            args += [flag, value]
    elif kind == "output":
        # Inputs as they are named and spelled otherwise, and a directory
        # that holds them; or a fresh path.
        flag = rng.choice(outputs)
        value = rng.choice(fx.inputs + [
            fx.hostile + "/../" + os.path.basename(fx.weights),
            fx.hostile + "/../" + os.path.basename(fx.heldout),
            fx.work, os.path.join(fx.work, "out", "x")])
        args += [flag, value]
    elif kind == "prompt" and "--prompt-tokens" in args:
        args[args.index("--prompt-tokens") + 1] = rng.choice(EDGE_PROMPTS)
    elif kind == "dtype":
        args += [rng.choice(["--data-dtype", "--data-format"]),
                 rng.choice(["uint32", "int64", "uint8", "megatron", "flat",
                             "auto", "float32", ""])]
    return args


def names_something(line, args):
    """Whether an error line names a flag or a file of the command line."""
    if "--" in line or "artifact" in line:
        return True
    # A Megatron dataset's files are named by their prefix.
    stems = [os.path.splitext(a)[0] for a in args[1:] if os.path.isabs(a)]
    return any(f"'{a}'" in line or (a and a in line) for a in args[1:] + stems)


def same_file(a, b):
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def inputs_of(args, paths):
    """The paths the command reads: the artifact and input flags' values."""
    named = [args[2 if args[1] == "generate" else 1]]
    named += [args[i + 1] for i in range(len(args) - 1) if args[i] in paths]
    return named


def check(args, inputs, fx, failures, tally):
    try:
        done = subprocess.run(args, capture_output=True, timeout=WATCHDOG_S,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        failures.append(("hang", args, ""))
        return
    err = done.stderr.decode(errors="replace")
    rc = done.returncode
    if "Sanitizer" in err or "runtime error:" in err:
        failures.append(("sanitizer report", args, err))
    elif rc not in (0, 1, 2):
        failures.append((f"exit status {rc}", args, err))
    elif rc != 0:
        # The message, up to the usage text that bad usage prints after a
        # blank line; warnings may come before it.
        message = [l for l in err.split("\n\n")[0].splitlines()
                   if not l.startswith("moe-run: warning:")]
        if len(message) != 1 or not message[0].startswith("moe-run: error: "):
            failures.append(("not a one-line error", args, err))
        elif not names_something(message[0], args):
            failures.append(("an error naming no flag or file", args, err))
        tally["refused"] += 1
        if SHOW:
            print(message[0] if message else err)
    else:
        tally["ran"] += 1
    changed = fx.changed()
    read = [p for p in changed if any(same_file(a, p) for a in inputs)]
    if read:
        failures.append((f"input changed: {read}", args, err))
    if changed:
        fx.restore(fx.clean)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--runs", type=int, required=True)
    parser.add_argument("--show", action="store_true")
    parser.add_argument("moe_run")
    parser.add_argument("work")
    a = parser.parse_args()
    global SHOW
    SHOW = a.show
    rng = random.Random(a.seed)
    fx = Fixtures(a.work)
    fx.clean = os.path.join(a.work, "clean")
    shutil.rmtree(fx.clean, ignore_errors=True)
    os.makedirs(fx.clean)
    for path in fx.inputs:
        shutil.copyfile(path, os.path.join(fx.clean, os.path.basename(path)))
    out = os.path.join(a.work, "out")

    generate = [a.moe_run, "generate", fx.artifact, "--load", fx.weights,
                "--prompt-tokens", "84,104,101", "--max-new", "4",
                "--threads", "1"]
    evaluate = [a.moe_run, fx.artifact, "--data", fx.train, "--steps", "1",
                "--threads", "1", "--quiet", "--eval-data", fx.heldout,
                "--eval-every", "1", "--eval-batches", "2"]
    commands = [
        ("generate", generate,
         ["--max-new", "--temperature", "--top-k", "--seed", "--threads"],
         ["--load", "--resume", "--prompt-data", "--tokenizer", "the artifact"],
         ["--out"]),
        ("eval", evaluate,
         ["--eval-every", "--eval-batches", "--data-seed", "--threads",
          "--start-step", "--log-every"],
         ["--eval-data", "--data", "--load", "the artifact"],
         ["--metrics", "--save", "--plot", "--checkpoint-dir",
          "--tensorboard"]),
    ]
    failures = []
    for name, base, numeric, paths, outputs in commands:
        tally = {"ran": 0, "refused": 0}
        for _ in range(a.runs):
            args = list(base)
            for _ in range(rng.randint(1, 2)):
                args = mutate(args, rng, fx, numeric, paths, outputs)
            # "the artifact" is the positional argument.
            args = [fx.artifact if x == "the artifact" else x for x in args]
            shutil.rmtree(out, ignore_errors=True)
            os.makedirs(out)
            check(args, inputs_of(args, paths), fx, failures, tally)
        print(f"flags-fuzz: {name}: {a.runs} runs: {tally['ran']} ran, "
              f"{tally['refused']} refused")
    for what, args, err in failures:
        print(f"FAIL ({what}): {' '.join(repr(x) for x in args)}\n{err}")
    if failures:
        sys.exit(1)
    print("flags-fuzz: every check held")


if __name__ == "__main__":
    main()
