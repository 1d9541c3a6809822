"""Why a layer's loads hit or miss in the L1: one SM's L1 replayed over the exact request stream, every load
sector classified by who read it last.

    python -m validation.l1_replay --random-case 4:52
    python -m validation.l1_replay --random-case 3:77 --sm 5 --json l1.json

The replay is a slow, plain-Python sectored LRU written from DESIGN section 4 (one OrderedDict a set,
``line mod sets``; loads and ``cp.async.ca`` look up and allocate, stores and ``cp.async.cg`` leave the L1
alone) over the requests that `traces.iter_request_chunks` gives the chosen SM, in their order. Each load
sector of A (input) and B (filters) falls in one class by the sector's previous read on that SM:

* ``first``: no earlier read on the SM;
* ``other CTA``: last read by another CTA;
* ``same CTA, same group`` / ``same CTA, later group`` (grouped layers: GEMM-K k-steps of one group, or a
  later group's; the analytic model's intra- and cross-group re-reads, MODEL.md section 6a);
* ``same CTA, d k-steps`` with d = 1, 2-8, 9-64, > 64 (dense layers).

Per class: reads, hits, and the share of reads whose line was in the L1 when the request came (a line
present with the sector missing is a sector miss; a request's later sectors of a line its earlier sector
allocated count as absent). Summed over every SM the hits equal the simulator's (`tests/test_l1_replay.py`),
so the classes split the simulated L1 hits, not an approximation of them. It answers the model's
question case by case: which re-reads does the model count as hits that the LRU misses.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import OrderedDict

import numpy as np

from simcore import metrics as M
from traces.cli import CLIError, cli_main

__all__ = ["replay_l1", "format_replay", "lru_lookup", "parse_random_case", "create_parser", "check_arguments", "run",
           "main"]

#: Dense layers: a same-CTA re-read's k-steps since the last read, (first, last or None, label).
_D_BINS = ((1, 1, "same CTA, 1 k-steps"), (2, 8, "same CTA, 2-8 k-steps"), (9, 64, "same CTA, 9-64 k-steps"),
           (65, None, "same CTA, > 64 k-steps"))


def _same_cta_class(prev_step, step, per_group):
    if per_group:
        return "same CTA, same group" if prev_step // per_group == step // per_group else "same CTA, later group"
    d = step - prev_step
    for lo, hi, label in _D_BINS:
        if d >= lo and (hi is None or d <= hi):
            return label
    return "same CTA, 0 k-steps"          # the same k-step (another request of it)


def lru_lookup(lines, line, sector, ways) -> tuple:
    """Read ``sector`` of ``line`` in one set of a sectored LRU (``lines``: an OrderedDict line -> its valid
    sectors, LRU first; DESIGN section 4): (hit, whether the line was there). A tag miss evicts the LRU line
    of a full set and allocates the line with this sector alone."""
    if line in lines:
        lines.move_to_end(line)
        held = lines[line]
        hit = sector in held
        if not hit:
            held[sector] = False
        return hit, True
    if len(lines) >= ways:
        lines.popitem(last=False)
    lines[line] = {sector: False}
    return False, False


def parse_random_case(text) -> tuple:
    """(seed, index) of a ``SEED:INDEX`` argument, or `CLIError`."""
    try:
        seed, index = (int(part) for part in text.split(":"))
    except ValueError:
        raise CLIError(f"--random-case: expected SEED:INDEX (two integers), got {text!r}") from None
    if seed < 0 or index < 0:
        raise CLIError(f"--random-case: SEED and INDEX must be non-negative, got {text!r}")
    return seed, index


def replay_l1(layer, gpu, kernel, sm: int = 0) -> dict:
    """Replay SM ``sm``'s L1 over the layer's request stream and classify its load sectors.

    Parameters
    ----------
    layer : traces.ConvLayer
    gpu : simcore.GPU
    kernel : traces.KernelConfig
    sm : int
        The SM, 0 <= sm < gpu.sms.

    Returns
    -------
    dict
        ``{"ways", "sets", "ctas", "classes": {operand: {class: {"reads", "hits", "line_present"}}}}``,
        operand ``"A"`` or ``"B"``.
    """
    from traces.stream import check_types, iter_request_chunks
    check_types(layer, gpu, kernel)
    if isinstance(sm, bool) or not isinstance(sm, (int, np.integer)) or not 0 <= sm < gpu.sms:
        raise ValueError(f"sm must be an integer in [0, {gpu.sms}), got {sm!r}")
    cfg = kernel.l1_config(gpu)
    ways, sets, line_b, sec_b = cfg.ways, cfg.sets, cfg.line_bytes, cfg.sector_bytes
    per_group = 0
    if layer.groups > 1:
        per_group = layer.r * layer.s * -(-layer.c_per_group // kernel.tile_k)
    cache = [OrderedDict() for _ in range(sets)]   # line -> valid sectors, LRU first
    last = {}                                      # sector address -> (cta, k-step) of its last read
    classes = {"A": {}, "B": {}}
    ctas = set()
    for chunk in iter_request_chunks(layer, gpu, kernel):
        for r in np.nonzero(chunk.sm == sm)[0]:
            kind = int(chunk.kind[r])
            if kind in (M.KIND_ST, M.KIND_CP_ASYNC_CG):     # neither looks up nor changes the L1
                continue
            op = "AB"[int(chunk.operand[r])] if chunk.operand[r] < 2 else None
            cta, step = int(chunk.cta[r]), int(chunk.kstep[r])
            ctas.add(cta)
            present = {}
            for j in range(int(chunk.first[r]), int(chunk.first[r]) + int(chunk.count[r])):
                addr = int(chunk.sectors[j])
                line, sector = addr // line_b, (addr % line_b) // sec_b
                lines = cache[line % sets]
                if line not in present:
                    present[line] = line in lines
                hit = lru_lookup(lines, line, sector, ways)[0]
                if op is None:
                    continue
                prev = last.get(addr)
                if prev is None:
                    cls = "first"
                elif prev[0] != cta:
                    cls = "other CTA"
                else:
                    cls = _same_cta_class(prev[1], step, per_group)
                last[addr] = (cta, step)
                entry = classes[op].setdefault(cls, {"reads": 0, "hits": 0, "line_present": 0})
                entry["reads"] += 1
                entry["hits"] += hit
                entry["line_present"] += present[line]
    return {"ways": ways, "sets": sets, "ctas": len(ctas), "classes": classes}


def class_table(title, heading, classes, columns, cell) -> str:
    """A replay's classes as a Markdown table: ``heading`` line, then per operand and class (``first`` first)
    the operand, the class, its reads with their share of the operand's, and ``cell(entry)`` for the rest of
    the ``columns``."""
    out = [title] if title else []
    out += [heading, "", "| operand | class | " + " | ".join(columns) + " |", "| --- | --- |" + " --- |" * len(columns)]
    for op, table in classes.items():
        total = sum(e["reads"] for e in table.values()) or 1
        for cls in sorted(table, key=lambda c: (c != "first", c)):
            e = table[cls]
            out.append(f"| {op} | {cls} | {e['reads']} ({100 * e['reads'] / total:.1f}%) | {cell(e)} |")
    return "\n".join(out) + "\n"


def format_replay(result: dict, title: str = "") -> str:
    """The replay as a Markdown table: operand, class, reads, hit rate, line present."""
    return class_table(title, f"L1 of one SM: {result['ways']} ways x {result['sets']} sets, {result['ctas']} CTAs "
                              f"ran on it", result["classes"], ("reads", "hits", "line present"),
                       lambda e: f"{100 * e['hits'] / e['reads']:.1f}% | {100 * e['line_present'] / e['reads']:.1f}%")


def create_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m validation.l1_replay",
                                description="Replay one SM's L1 over a random case's exact request stream and "
                                            "classify every load sector by its previous reader (first read, "
                                            "another CTA, the same CTA k-steps or groups before).")
    add_case_arguments(p)
    p.add_argument("--sm", type=int, default=0, help="the SM to replay (default 0)")
    return p


def add_case_arguments(p) -> None:
    """The replays' ``--random-case`` and ``--json`` (`validation.l2_replay` takes them too)."""
    p.add_argument("--random-case", metavar="SEED:INDEX", required=True,
                   help="the case of validation.random_cases (as validation.accuracy --random N --seed SEED "
                        "--case INDEX draws it)")
    p.add_argument("--json", metavar="FILE", help="also write the classes as JSON")


def check_arguments(args) -> None:
    args.seed, args.index = parse_random_case(args.random_case)
    if args.json:
        from .common import check_output_path
        check_output_path("--json", args.json)


def write_json(path, doc) -> None:
    """Write ``doc`` to ``path`` as indented JSON, atomically (no half-written file)."""
    from .common import atomic_write

    def write(tmp):
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=1)
    atomic_write(path, write)


def run(args) -> int:
    from .random_cases import random_case
    case = random_case(args.seed, args.index)
    if not 0 <= args.sm < case.gpu.sms:
        raise CLIError(f"--sm {args.sm}: the case's GPU has {case.gpu.sms} SMs")
    result = replay_l1(case.layer, case.gpu, case.kernel, args.sm)
    sys.stdout.write(format_replay(result, f"case {args.seed}:{args.index}: {case.describe()}, SM {args.sm}"))
    if args.json:
        write_json(args.json, {"format": "deltasim-l1-replay", "version": 1, "case": args.random_case, "sm": args.sm,
                               **result})
    return 0


def main(argv=None) -> int:
    return cli_main(create_parser, check_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
