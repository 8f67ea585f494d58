"""Checks a document-masked step dump against each document run alone.

Usage: document_reference.py DUMP_DIR [--rtol R]

A step with document masking (moe.transformer document_mask, eos_token_id)
must equal an independent computation that runs every document of every
row as a sequence of its own: the PyTorch reference model of
mixtral_reference.py, in float64, on each document with positions from 0,
the cross-entropy summed over all documents' targets and divided by their
count (the dump's targets already ignore those that begin the next
document). A new document begins at a row's first token and after every
eos_token_id. The router's load-balancing loss mixes all of a batch's
tokens, so the model must have aux_coef = 0 (and no capacity factor);
anything else is refused.

Prints the loss and each gradient's relative error and exits non-zero when
one exceeds the tolerance (default 1e-4). --whole-rows runs each row as one
sequence instead, the unmasked computation, which a masked dump must fail.
"""

import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mixtral_reference as ref  # noqa: E402


def documents(row, eos):
    """[begin, end) of each document of one row of token ids."""
    bounds, begin = [], 0
    for s in range(1, len(row)):
        if row[s - 1] == eos:
            bounds.append((begin, s))
            begin = s
    bounds.append((begin, len(row)))
    return bounds


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dump")
    parser.add_argument("--rtol", type=float, default=1e-4)
    parser.add_argument("--whole-rows", action="store_true",
                        help="one sequence per row: the check's negative control")
    args = parser.parse_args(argv)

    with open(os.path.join(args.dump, "config.json")) as f:
        raw = json.load(f)
    if not raw.get("document_mask"):
        sys.exit("document_reference: the dump's model has no document_mask")
    eos = raw.get("eos_token_id", -1)
    if eos is None or eos < 0:
        sys.exit("document_reference: the dump's model has no eos_token_id")
    dump = ref.load_dump(args.dump)
    cfg = dump["cfg"]
    if cfg.aux_coef != 0 or cfg.capacity_factor != 0:
        sys.exit("document_reference: the load-balancing loss and a capacity "
                 "factor mix the batch's documents; use aux_coef = 0 and no "
                 "capacity factor")
    params, _ = ref.split_working_copies(dump["params"])
    model = ref.build_model(cfg, params, torch.float64)
    tokens = np.asarray(dump["batch"]["tokens"])
    targets = np.asarray(dump["batch"]["targets"])

    model.zero_grad(set_to_none=True)
    total, count, pieces = None, 0, 0
    for b in range(tokens.shape[0]):
        spans = ([(0, tokens.shape[1])] if args.whole_rows
                 else documents(tokens[b], eos))
        for begin, end in spans:
            t = torch.from_numpy(tokens[b, begin:end][None]).long()
            y = torch.from_numpy(targets[b, begin:end][None]).long()
            n = int((y >= 0).sum())
            pieces += 1
            if n == 0:
                continue
            ce_sum = model(t, y)["ce"] * n
            total = ce_sum if total is None else total + ce_sum
            count += n
    loss = total / count
    loss.backward()

    report = ref.Report()
    report.add("loss", "ce", float(dump["metrics"]["ce_loss"]
                                   if "ce_loss" in dump["metrics"]
                                   else dump["metrics"]["loss"]),
               float(loss), args.rtol)
    for name, p in model.named_parameters():
        grad = p.grad if p.grad is not None else torch.zeros_like(p)
        report.add("grad", name, dump["grads"][name], grad.numpy(), args.rtol,
                   ref.shape_str(grad))
    print(f"{pieces} documents over {tokens.shape[0]} rows, {count} targets")
    report.print()
    failures = report.failures()
    if failures:
        print(f"FAIL: {len(failures)} of {len(report.rows)} checks beyond "
              f"{args.rtol:g}")
        sys.exit(1)
    print(f"PASS: all {len(report.rows)} checks within {args.rtol:g}")


if __name__ == "__main__":
    main()
