"""Why a layer's L2 reads go to DRAM: every SM's L1 and the L2 replayed over the exact request stream, every
A and B read that reaches the L2 classified by who read that sector at the L2 last.

    python -m validation.l2_replay --random-case 2:132
    python -m validation.l2_replay --random-case 3:111 --json l2.json

The replay is plain Python written from DESIGN section 4: one sectored LRU a set (an OrderedDict, LRU first),
the L1s as `validation.l1_replay` replays them (loads and ``cp.async.ca`` look up and allocate; stores and
``cp.async.cg`` leave the L1 alone and go to the L2), the L2's slice and set functions of section 4 (``xor``:
the xor-folded line mod slices, then the slice's index on line // slices), writes allocating without a fetch,
valid and dirty, in the stream's issue order (`traces.iter_request_chunks`), the order the simulator's slices
see. Each L2 read sector of A (input) and B (filters) falls in one class by the sector's previous L2 read:

* ``first``: none (a compulsory read, or a line whose other sectors came before);
* ``same CTA, d k-steps`` (d = 0, 1, 2-8, 9-64, > 64): the CTA's own earlier read that missed its L1;
* ``other CTA, same k-step``: another CTA at the same k-step (a wave's CTAs of one tile read the same sectors in
  the same round, from other SMs);
* ``other CTA, other k-step``: another CTA at another k-step (a later wave's re-fetch, a halo).

Per class: reads, the reads that miss (DRAM reads), and the share whose line was in the L2. Summed, the reads,
misses and DRAM reads equal the simulator's (`tests/test_l2_replay.py`). It answers the model's L2 question case
by case, as `validation.l1_replay` answers the L1's. Slow: about a microsecond or two a sector, every SM.
"""
from __future__ import annotations

import argparse
import sys
from collections import OrderedDict

from simcore import metrics as M
from traces.cli import CLIError, cli_main

from .l1_replay import (add_case_arguments, check_arguments as check_case_arguments, class_table, lru_lookup,
                        write_json)

__all__ = ["replay_l2", "format_l2_replay", "create_parser", "check_arguments", "run", "main"]

#: a same-CTA re-read's k-steps since the sector's last L2 read: (first, last or None, label)
_D_BINS = ((0, 0, "same CTA, 0 k-steps"), (1, 1, "same CTA, 1 k-steps"), (2, 8, "same CTA, 2-8 k-steps"),
           (9, 64, "same CTA, 9-64 k-steps"), (65, None, "same CTA, > 64 k-steps"))


def _class(prev, cta, step):
    if prev is None:
        return "first"
    if prev[0] != cta:
        return "other CTA, same k-step" if prev[1] == step else "other CTA, other k-step"
    d = abs(step - prev[1])
    for lo, hi, label in _D_BINS:
        if d >= lo and (hi is None or d <= hi):
            return label
    return "same CTA, > 64 k-steps"


def _l2_place(line, slices, sets, xor):
    """(slice, set) of ``line`` by DESIGN section 4's functions."""
    q = line // slices
    if xor:
        bits = sets.bit_length() - 1
        return (line ^ (line >> 7) ^ (line >> 14)) % slices, (q ^ (q >> bits) ^ (q >> (2 * bits))) & (sets - 1)
    return line % slices, (q & (sets - 1)) if sets & (sets - 1) == 0 else q % sets


def replay_l2(layer, gpu, kernel) -> dict:
    """Replay every L1 and the L2 over the layer's request stream and classify the L2's A and B read sectors.

    Parameters
    ----------
    layer : traces.ConvLayer
    gpu : simcore.GPU
    kernel : traces.KernelConfig

    Returns
    -------
    dict
        ``{"l2_ways", "l2_sets", "l2_slices", "dram_writes", "classes": {operand: {class: {"reads", "misses",
        "line_present"}}}}``, operand ``"A"`` or ``"B"``.
    """
    from traces.stream import check_types, iter_request_chunks
    check_types(layer, gpu, kernel)
    l1cfg = kernel.l1_config(gpu)
    l1_ways, l1_sets, line_b, sec_b = l1cfg.ways, l1cfg.sets, l1cfg.line_bytes, l1cfg.sector_bytes
    slices, sets, ways = gpu.l2_slices, gpu.l2_sets_per_slice, gpu.l2_ways
    xor = gpu.l2_index == "xor"
    l1 = [[OrderedDict() for _ in range(l1_sets)] for _ in range(gpu.sms)]
    l2 = {}                                        # (slice, set) -> OrderedDict line -> {sector: dirty}
    last = {}                                      # sector address -> (cta, k-step) of its last L2 read
    classes = {"A": {}, "B": {}}
    dram_writes = 0
    for chunk in iter_request_chunks(layer, gpu, kernel):
        for r in range(chunk.sm.shape[0]):
            kind = int(chunk.kind[r])
            store = kind == M.KIND_ST
            looks_up = kind not in (M.KIND_ST, M.KIND_CP_ASYNC_CG)
            op = "AB"[int(chunk.operand[r])] if chunk.operand[r] < 2 else None
            cta, step, sm = int(chunk.cta[r]), int(chunk.kstep[r]), int(chunk.sm[r])
            for j in range(int(chunk.first[r]), int(chunk.first[r]) + int(chunk.count[r])):
                addr = int(chunk.sectors[j])
                line, sector = addr // line_b, (addr % line_b) // sec_b
                if looks_up and lru_lookup(l1[sm][line % l1_sets], line, sector, l1_ways)[0]:
                    continue                       # an L1 hit never reaches the L2
                place = _l2_place(line, slices, sets, xor)
                lines = l2.get(place)
                if lines is None:
                    lines = l2[place] = OrderedDict()
                present = line in lines
                if present:
                    lines.move_to_end(line)
                    held = lines[line]
                else:
                    if len(lines) >= ways:
                        dram_writes += sum(lines.popitem(last=False)[1].values())
                    held = lines[line] = {}
                if store:
                    held[sector] = True
                    continue
                hit = sector in held
                if not hit:
                    held[sector] = False
                if op is None:
                    continue
                prev = last.get(addr)
                last[addr] = (cta, step)
                entry = classes[op].setdefault(_class(prev, cta, step), {"reads": 0, "misses": 0, "line_present": 0})
                entry["reads"] += 1
                entry["misses"] += not hit
                entry["line_present"] += present
    return {"l2_ways": ways, "l2_sets": sets, "l2_slices": slices, "dram_writes": dram_writes, "classes": classes}


def format_l2_replay(result: dict, title: str = "") -> str:
    """The replay as a Markdown table: operand, class, L2 reads, their misses (DRAM reads), line present."""
    return class_table(title, f"L2: {result['l2_slices']} slices x {result['l2_sets']} sets x {result['l2_ways']} ways",
                       result["classes"], ("L2 reads", "miss (DRAM reads)", "line present"),
                       lambda e: f"{e['misses']} ({100 * e['misses'] / e['reads']:.1f}%) | "
                                 f"{100 * e['line_present'] / e['reads']:.1f}%")


def create_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m validation.l2_replay",
                                description="Replay every L1 and the L2 over a random case's exact request stream "
                                            "and classify every A and B read at the L2 by the sector's previous L2 "
                                            "read (first, the same CTA k-steps before, another CTA at the same or "
                                            "another k-step), with its DRAM reads. Plain Python: slow on large "
                                            "cases (a microsecond or two a sector).")
    add_case_arguments(p)
    return p


def check_arguments(args) -> None:
    check_case_arguments(args)


def run(args) -> int:
    from .random_cases import random_case
    case = random_case(args.seed, args.index)
    result = replay_l2(case.layer, case.gpu, case.kernel)
    sys.stdout.write(format_l2_replay(result, f"case {args.seed}:{args.index}: {case.describe()}"))
    if args.json:
        write_json(args.json, {"format": "deltasim-l2-replay", "version": 1, "case": args.random_case, **result})
    return 0


def main(argv=None) -> int:
    return cli_main(create_parser, check_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
