"""Whether an L1 set that one operand's lines crowd also holds the other's: the cosets of sets two
operands' k-step lines fall in (MODEL.md section 2, "A and B in the same sets").

Where a row pitch is a multiple of g lines (g | sets), a k-step's lines of that operand fall in one coset
o + <g> of the L1's sets, o the line of its first byte: dy rows 512 bytes apart on a 4-set L1 all land in
one set. The dense engine counts the other operand's lines in a window as spread over the larger of the
two operands' set counts, so one operand crowding one set puts all of the other's lines there too. That
holds for fprop, whose k-step reads the same channel block of x and of w (and their tensors start in
the same phase); dgrad reads dy's filter block k0 and w's column block c0 (the CTA's), so the two cosets
meet only where those phases agree (`dgrad_phase_share`). In fprop the coset moves with the channel block,
k-step by k-step, so a filter line away for some rounds meets only the rounds of its own coset
(`fprop_block_phases`)."""
from __future__ import annotations

import functools
import math

import numpy as np

from traces.stream import tensor_bases

__all__ = ["dgrad_phase_share", "fprop_block_phases"]


def dgrad_phase_share(layer, kernel, unit, row_b, nsa, nsb, sets, line) -> float:
    """Unit-stride dgrad: the share of (k-step block k0, CTA column) pairs whose dy lines fall in a set
    that the column's filter lines reach, where each operand reaches fewer than all sets (1 elsewhere).
    ``unit``: dy's pixel pitch (K e bytes); ``row_b``: w's row pitch (R S C e); ``nsa`` / ``nsb``: the sets
    each reaches (the model's `_nsets`). Seed 5 #44 (K = 128 fp32, 7x1 filters of C = 384: dy rows 4 lines
    apart, w rows 84): a k-step's dy lines meet its filter lines' set in one k-step of four, and a CTA
    reading the filter lines an earlier slot just read finds them in the other three (simulated 71 %)."""
    eb = kernel.elem_bytes
    tk, tn = kernel.tile_k, kernel.tile_n
    if nsa >= sets or nsb >= sets or unit % line or row_b % line or (tk * eb) > line:
        return 1.0
    # dy's lines of a k-step: a coset of the sets modulo sets / nsa; w's rows: modulo gcd(rows' lines, sets)
    g = math.gcd(sets // nsa, math.gcd(row_b // line, sets))
    if g <= 1:
        return 1.0
    _x_base, w_base, y_base = tensor_bases(layer, kernel)
    k0 = np.arange(0, layer.k, tk, dtype=np.int64)
    if np.any((k0 * eb) % line + tk * eb > line):  # a block that straddles lines reaches two classes
        return 1.0
    a_class = ((y_base + k0 * eb) // line) % g
    c0 = np.arange(0, layer.c, tn, dtype=np.int64)
    width = np.minimum(tn, layer.c - c0) * eb
    first = (w_base + c0 * eb) // line
    last = (w_base + c0 * eb + width - 1) // line
    span = last - first + 1                        # the column block's lines: consecutive classes
    hit = ((a_class[:, None] - first[None, :] % g) % g) < span[None, :]
    return float(hit.mean())


@functools.lru_cache(maxsize=1024)
def fprop_block_phases(layer, kernel, unit, row_b, sets, line) -> tuple:
    """nhwc 1x1 fprop: (P, R) where a k-step's lines of x and of w fall in one class of P classes of the L1's
    sets, the class of its channel block's line (P = gcd(the pixel's lines, sets), P > 1 where a pixel is at
    least two lines on a power-of-two set count), R the k-steps that read one line (line / (T_k e)); the two
    tensors start in the same class. Consecutive k-steps walk the classes in turn, so a filter line read at a
    k-step and again some k-steps later meets, of the rounds between, only those of its own class: 67 #60
    (C 64 fp32, two lines a pixel, 4 sets, two k-steps a CTA) re-reads the previous wave's filter lines after one
    round of the other class, 47 lines on 48 ways, and hits 100 % simulated. (1, 1) elsewhere: the rounds of
    other filter taps change the pixels, and their lines' classes with them (`position_phases`)."""
    eb = kernel.elem_bytes
    block = kernel.tile_k * eb
    if (layer.r * layer.s != 1 or kernel.layout != "nhwc" or unit % line or row_b != unit or line % block
            or (layer.c * eb) % line):
        return 1, 1
    p = math.gcd(unit // line, sets)
    if p <= 1:
        return 1, 1
    x_base, w_base, _y_base = tensor_bases(layer, kernel)
    if (x_base // line - w_base // line) % p:
        return 1, 1
    return p, line // block
