"""The exact global-memory request stream of the CTA-tiled implicit-GEMM kernel (DESIGN sections 3, 3a).

`iter_request_chunks(layer, gpu, kernel)` yields the stream in fixed-size chunks (`RequestChunk`):
every warp-level load/store request, in global issue order (dispatch passes, rounds, SMs, slots,
A then B requests of a k-step, then the CTA's stores in the epilogue's order), with the distinct 32-byte
sectors each request touches, ascending. The generator is a resumable Numba kernel: the scheduler state
lives in a few small arrays, so it fills a fixed-size buffer, returns, and continues where it stopped.
Memory never grows with the trace length.

``kernel.op`` picks the pass: fprop (A = x, B = w, C = y), dgrad (A = dy, B = w, C = dx) or wgrad
(A = dy, B = x, C = dw); the layer is the forward layer, and tensors lie as DESIGN section 3 places them
(x-shaped at 0, then w-shaped, then y-shaped). One plan per op (`plan_stream`) and one compiled walk
(`traces._generate`): an op changes how a CTA starts, its k-step count and order, and how a k-step's
requests and the stores are emitted. What `traces/KERNELS.md` adds to DESIGN (strided dgrad's idle CTAs,
the epilogue's warp arrangement) is implemented here.

Implementation notes (all exact, no approximation):

* A warp request is split into *segments*: runs of lanes with the same strided index and consecutive
  contiguous offsets. A segment's valid lanes cover one contiguous byte range (predicates along the
  contiguous dimension -- c < C, gk < C R S, k < K -- clip a prefix), so its sectors are one range.
  Only the nchw A operand (contiguous = output rows m, whose padding predicate differs per lane) and
  the nchw stores (rows may cross an image boundary) are generated lane by lane; wgrad's B segments
  (contiguous = rsc) are split where the filter position changes.
* Per-CTA row information (image offset, p*stride-pad, q*stride-pad; dgrad: dy's (p, q) origin of each
  dx row) is computed once when a CTA is dispatched; an invalid row (m >= M) gets a large negative
  h-origin, so the padding test rejects it. Rows whose strided index is the k-step's (dgrad B, wgrad A
  and B) are computed per k-step.
* A request's sectors are kept sorted and distinct by insertion into the output buffer (appends are
  the common case).
* The generator stops between CTA steps when the buffer cannot hold another step's worst case, so
  the buffer is at least one step's worth (``max_sectors`` is raised to that if smaller).
* Fast path (_UNI: fprop or dgrad nhwc with A's t_c dividing 32, e.g. the default kernels): every
  segment of A (fprop: and B) is one whole tile row, so a request is `rpw` = 32 / t_c consecutive rows,
  all with the k-step's channel range; the rows of a CTA are stored in request order. Valid rows'
  addresses increase by more than a row's span (A: m order is (n, h, w) order; B: filters), so their
  sectors come sorted and distinct without insertion. With _ALN (the channels of A's rows times
  elem_bytes a multiple of the sector: C for fprop, K for dgrad) every A row spans the same sectors at
  the same offset (the k-step is written out in `traces._generate`), and fprop B's requests are the
  same in every k-step of a CTA, up to that offset.
"""
from __future__ import annotations

import functools
from typing import Iterator, NamedTuple

import numpy as np

from simcore.gpus import GPU

from ._generate import _generate, generate_flags
from ._layout import (
    _N, _C, _H, _W, _K, _R, _S, _SH, _SW, _PH, _PW, _DH, _DW, _P, _Q, _M, _GK, _TM, _TN, _TK, _THREADS,
    _NCHW, _EB, _V, _TCA, _TSA, _IA, _TCB, _TSB, _IB, _SMS, _SLOTS, _TILES_M, _TILES_N, _SWZ, _NBLOCKS,
    _KSTEPS, _KBLK, _XB, _WB, _YB, _SSH, _STEP_REQ, _STEP_SEC, _UNI, _RPW, _ALN, _OP, _GN, _TMPF, _NPQ,
    _GPC, _CG, _KG, _KA, _KB, _SROWS, _SCOLS, _NPARAMS, _ST_DONE, _F_SKIP, _F_NR, _F_NS, _F_PP, _F_QQ, _F_KSTEPS,
    _F_COLS)
from . import _tensorop
from .epilogue import store_row_order
from .grouped import groups_per_cta
from .kernel import OPS, KernelConfig
from .layer import ConvLayer

__all__ = ["RequestChunk", "iter_request_chunks", "tensor_bases", "StreamPlan", "plan_stream"]

TENSOR_ALIGN = 256


class RequestChunk(NamedTuple):
    """One chunk of the request stream (arrays may be views of reused buffers: copy what you keep).
    Chunks of a lean `_Generator` have None for round, cta and kstep."""

    round: np.ndarray      # int64, round of the request
    sm: np.ndarray         # int32
    cta: np.ndarray        # int64, linear block id
    operand: np.ndarray    # uint8, 0 A (input), 1 B (filter), 2 C (output)
    kind: np.ndarray       # uint8, simcore.metrics.KIND_*: 0 ld, 1 st, 2 cp.async.cg, 3 cp.async.ca
    kstep: np.ndarray      # int32, k-step (stores: the CTA's number of k-steps)
    first: np.ndarray      # int64, index of the request's first sector in `sectors`
    count: np.ndarray      # int32, number of sectors (>= 1)
    sectors: np.ndarray    # int64 byte addresses (multiples of the sector size)


def _round_up(value: int, align: int) -> int:
    return -(-value // align) * align


def tensor_bases(layer: ConvLayer, kernel: KernelConfig) -> tuple:
    """(x_base, w_base, y_base) byte offsets: x at 0; w, then y, at the next multiple of 256 bytes
    at or after the previous tensor's end (DESIGN "Tensor placement")."""
    if not isinstance(layer, ConvLayer):
        raise TypeError(f"layer must be a traces.ConvLayer, got {type(layer).__name__}")
    if not isinstance(kernel, KernelConfig):
        raise TypeError(f"kernel must be a traces.KernelConfig, got {type(kernel).__name__}")
    eb = kernel.elem_bytes
    x_base = 0
    w_base = _round_up(x_base + layer.input_elements * eb, TENSOR_ALIGN)
    y_base = _round_up(w_base + layer.params * eb, TENSOR_ALIGN)
    return x_base, w_base, y_base


class StreamPlan(NamedTuple):
    """Everything the compiled generator needs (validated, derived once per layer)."""

    params: np.ndarray
    seg_a: np.ndarray       # (segments, 3): strided offset, first and end contiguous offsets of each
    seg_a_start: np.ndarray # run of lanes of operand A; warp w's segments are seg_a_start[w:w+2]
    seg_b: np.ndarray
    seg_b_start: np.ndarray
    thr_a: np.ndarray       # (threads, 2): contiguous offset, strided offset of each thread for A
    perm_a: np.ndarray      # tile rows of A / B in the order the generator stores them (_UNI: request
    perm_b: np.ndarray      # order, rows q*rpw .. q*rpw+rpw-1 are request q; else identity)
    fpos: np.ndarray        # filter positions (`_layout._F_*` columns): strided dgrad's starting positions
    store_order: np.ndarray # tile rows in the order the epilogue stores them (`traces.epilogue`)
    slots: int
    sms: int
    step_requests: int
    step_sectors: int
    ctas: int               # CTAs that store (each once; strided dgrad: not every CTA that runs)
    blocks: int


def _frozen(array):
    array.setflags(write=False)         # cached (shared by plans): read-only
    return array


@functools.lru_cache(maxsize=64)        # plan_stream runs per layer: these are the same for a kernel
def _segments(tmap, threads: int, align: int):
    """Per warp and sub-access, the runs of lanes sharing a strided index whose accessed elements are
    consecutive; a vector is loaded by vector / align accesses of align elements (runs w * subs + v)."""
    rows, starts = [], [0]
    for warp in range(threads // 32):
        for sub in range(0, tmap.vector, align):
            for t in range(32 * warp, 32 * warp + 32):
                so = tmap.strided_offset(t)
                co = tmap.contiguous_offset(t) + sub
                if len(rows) > starts[-1] and rows[-1][0] == so and rows[-1][2] == co:
                    rows[-1] = (so, rows[-1][1], co + align)
                else:
                    rows.append((so, co, co + align))
            starts.append(len(rows))
    return _frozen(np.array(rows, dtype=np.int64).reshape(-1, 3)), _frozen(np.array(starts, dtype=np.int64))


def check_instances(layer, gpu, kernel) -> None:
    """TypeError unless ``layer``, ``gpu`` and ``kernel`` are a ConvLayer, a GPU and a KernelConfig."""
    if not isinstance(layer, ConvLayer):
        raise TypeError(f"layer must be a traces.ConvLayer, got {type(layer).__name__}")
    if not isinstance(gpu, GPU):
        raise TypeError(f"gpu must be a simcore.GPU, got {type(gpu).__name__}")
    if not isinstance(kernel, KernelConfig):
        raise TypeError(f"kernel must be a traces.KernelConfig, got {type(kernel).__name__}")


def check_types(layer, gpu, kernel) -> None:
    """Type checks shared by the simulator and the analytic model, plus kernel.check_layer(layer) and, for
    tensor-op kernels, tensor cores on ``gpu`` that take the kernel's dtype."""
    check_instances(layer, gpu, kernel)
    kernel.check_layer(layer)
    if kernel.math == "tensorop":
        gpu.tensor_tflops_for(kernel.dtype)     # ValueError: this GPU's tensor cores do not take the dtype


def check_inputs(layer, gpu, kernel) -> int:
    """Validate the arguments (clear Python errors before any compiled code); return CTAs per SM."""
    check_types(layer, gpu, kernel)
    slots = kernel.resident_ctas(gpu)          # raises if the kernel does not fit the GPU
    kernel.l1_config(gpu)                      # raises if no L1 is left
    if gpu.sector_bytes & (gpu.sector_bytes - 1):
        raise ValueError(f"GPU.sector_bytes must be a power of two, got {gpu.sector_bytes}")
    return slots


def _filter_positions(layer: ConvLayer, kernel: KernelConfig, ksteps: int):
    """The filter-position table (`_layout._F_*` columns) and tile_m per filter position. Strided dgrad
    (DESIGN section 3a): one row per starting position f = (start_r, start_s), each owning
    tile_m_per_filter M tiles; every other kernel: one row, all of the M tiles."""
    table = np.zeros((1, _F_COLS), dtype=np.int64)
    gemm_m = kernel.gemm_shape(layer)[0]
    if kernel.op != "dgrad" or layer.stride == (1, 1):
        table[0, [_F_NR, _F_NS, _F_PP, _F_QQ, _F_KSTEPS]] = layer.r, layer.s, layer.h, layer.w, ksteps
        return table, -(-gemm_m // kernel.tile_m)
    (sh, sw), (ph, pw) = layer.stride, layer.pad
    per_filter = -(-layer.n * -(-layer.h // sh) * -(-layer.w // sw) // kernel.tile_m)
    table = np.zeros((sh * sw, _F_COLS), dtype=np.int64)
    kblocks = -(-layer.k // kernel.tile_k)
    for f in range(sh * sw):
        r0, s0 = divmod(f, sw)
        h0 = abs(sh - (ph % sh - r0)) % sh                 # strided_dgrad_starting_coords
        w0 = abs(sw - (pw % sw - s0)) % sw
        nr = -(-(layer.r - r0) // sh) if r0 < layer.r else 0
        ns = -(-(layer.s - s0) // sw) if s0 < layer.s else 0
        table[f] = (h0 >= layer.h or w0 >= layer.w, r0, s0, h0, w0, nr, ns,
                    -(-(layer.h - h0) // sh), -(-(layer.w - w0) // sw), kblocks * nr * ns)
    return table, per_filter


def plan_stream(layer: ConvLayer, gpu: GPU, kernel: KernelConfig) -> StreamPlan:
    slots = check_inputs(layer, gpu, kernel)
    nchw = kernel.layout == "nchw"
    op = kernel.op
    ta, tb = kernel.thread_map_a, kernel.thread_map_b
    eb, v = kernel.elem_bytes, kernel.vector
    gemm_m, gemm_n, gemm_k = kernel.gemm_shape(layer)
    gpc = groups_per_cta(layer, kernel) if layer.groups > 1 else 0     # 0: not grouped
    if nchw:
        kblk = -(-layer.gemm_k // kernel.tile_k)
        ksteps = kblk
    elif op == "wgrad":
        kblk = ksteps = -(-gemm_k // kernel.tile_k)
    elif op == "fprop":                     # channel blocks of C (grouped: of each of the CTA's groups)
        kblk = -(-layer.c_per_group // kernel.tile_k) * max(gpc, 1)
        ksteps = kblk * layer.r * layer.s
    else:                                   # dgrad: filter blocks of K
        kblk = -(-layer.k // kernel.tile_k)
        ksteps = kblk * layer.r * layer.s
    fpos, per_filter = _filter_positions(layer, kernel, ksteps)
    tiles_m = per_filter * len(fpos)
    tiles_n = -(-gemm_n // kernel.tile_n)
    swz = kernel.swizzle_log
    blocks = (tiles_m << swz) * (-(-tiles_n // (1 << swz)))
    sb = gpu.sector_bytes
    # sectors one lane can touch: a lane's bytes start at a multiple of v*eb (bases are 256-aligned,
    # contiguous offsets and extents are multiples of v), so one sector when v*eb divides the sector
    align = _tensorop.alignment(kernel, layer)   # elements per access (tensor-op: gcd(C, 8))
    lane_span = 1 if sb % (align * eb) == 0 else -(-(align * eb) // sb) + 1
    warps = kernel.warps
    kstep_req = warps * (ta.iterations + tb.iterations) * (v // align)
    store_rows, store_cols = _tensorop.store_shape(kernel)
    if nchw:
        store_req = kernel.tile_n * (-(-kernel.tile_m // 32))
    else:
        store_req = kernel.tile_m // store_rows * (-(-kernel.tile_n // store_cols))
    step_req = max(kstep_req, store_req)
    step_sec = max(kstep_req, store_req) * 32 * lane_span
    x_base, w_base, y_base = tensor_bases(layer, kernel)
    # fprop and dgrad nhwc with t_c dividing 32: every segment of A is one whole tile row, a warp's
    # segments are `rpw` consecutive rows, all with the k-step's channel range (fprop: B too)
    # (grouped layers take the segment path of `traces._group_steps`)
    uni = not nchw and op != "wgrad" and 32 % ta.t_c == 0 and align == v and not gpc
    # ... and every A row address a multiple of the sector (fprop: B's too): a k-step's rows all span the
    # same number of sectors, starting at the row address plus the same offset
    if op == "fprop":
        aln = uni and (layer.c * eb) % sb == 0 and x_base % sb == 0 and w_base % sb == 0
    else:                                   # dgrad: A = dy
        aln = uni and (layer.k * eb) % sb == 0 and y_base % sb == 0
    kinds = _tensorop.operand_kinds(kernel, layer)
    params = np.zeros(_NPARAMS, dtype=np.int64)
    vals = {
        _N: layer.n, _C: layer.c, _H: layer.h, _W: layer.w, _K: layer.k, _R: layer.r, _S: layer.s,
        _SH: layer.stride[0], _SW: layer.stride[1], _PH: layer.pad[0], _PW: layer.pad[1],
        _DH: layer.dilation[0], _DW: layer.dilation[1], _P: layer.p, _Q: layer.q, _M: layer.gemm_m,
        _GK: layer.gemm_k, _TM: kernel.tile_m, _TN: kernel.tile_n, _TK: kernel.tile_k,
        _THREADS: kernel.threads, _NCHW: int(nchw), _EB: eb, _V: v,
        _TCA: ta.t_c, _TSA: ta.t_s, _IA: ta.iterations, _TCB: tb.t_c, _TSB: tb.t_s, _IB: tb.iterations,
        _SMS: gpu.sms, _SLOTS: slots, _TILES_M: tiles_m, _TILES_N: tiles_n, _SWZ: swz,
        _NBLOCKS: blocks, _KSTEPS: ksteps, _KBLK: kblk, _XB: x_base, _WB: w_base, _YB: y_base,
        _SSH: sb.bit_length() - 1, _STEP_REQ: step_req, _STEP_SEC: step_sec,
        _UNI: int(uni), _RPW: 32 // ta.t_c if uni else 0, _ALN: int(aln),
        _OP: OPS.index(op), _GN: gemm_n, _TMPF: per_filter, _NPQ: layer.gemm_m,
        _GPC: gpc, _CG: layer.c_per_group, _KG: layer.k_per_group,
        _KA: kinds[0], _KB: kinds[1], _SROWS: store_rows, _SCOLS: store_cols,
    }
    for key, value in vals.items():
        params[key] = value
    seg_a, seg_a_start = _segments(ta, kernel.threads, align if op == "fprop" else v)
    seg_b, seg_b_start = _segments(tb, kernel.threads, align if op == "fprop" else v)
    thr_a = _thread_offsets(ta, kernel.threads)
    perm_a = _request_order(ta, warps, kernel.tile_m, uni)
    perm_b = _request_order(tb, warps, kernel.tile_n, uni and op == "fprop")
    # CTAs with a valid output row (they store): strided dgrad's starting positions own N P' Q' rows each
    ctas = tiles_n * (sum(-(-layer.n * int(row[_F_PP] * row[_F_QQ]) // kernel.tile_m) for row in fpos
                          if not row[_F_SKIP]) if len(fpos) > 1 else tiles_m)
    return StreamPlan(params, seg_a, seg_a_start, seg_b, seg_b_start, thr_a, perm_a, perm_b, _frozen(fpos),
                      store_row_order(kernel), slots, gpu.sms, step_req, step_sec, ctas, blocks)


@functools.lru_cache(maxsize=64)
def _thread_offsets(tmap, threads: int) -> np.ndarray:
    """(threads, 2): each thread's contiguous and strided offset."""
    return _frozen(np.array([(tmap.contiguous_offset(t), tmap.strided_offset(t)) for t in range(threads)],
                            dtype=np.int64).reshape(-1, 2))


@functools.lru_cache(maxsize=64)
def _request_order(tmap, warps: int, rows: int, uni: bool) -> np.ndarray:
    """The order the generator stores an operand's `rows` tile rows in: under _UNI request order (warp
    wp, iteration j: rows so + j*t_s + 0 .. rpw-1, so the strided offset of the warp's lane 0: stripmined
    wp*rpw, warp-raked wp*rpw*iterations), else the identity."""
    if not uni:
        return _frozen(np.arange(rows, dtype=np.int64))
    rpw = 32 // tmap.t_c
    return _frozen(np.array([tmap.strided_offset(32 * wp) + j * tmap.t_s + x for wp in range(warps)
                             for j in range(tmap.iterations) for x in range(rpw)], dtype=np.int64))


class _Generator:
    """Holds the plan, the scheduler state and the per-slot tile information.

    ``lean=True``: `new_buffers` gives None for round, cta and kstep, which are then not written, and
    `fill` returns chunks with None in those fields (`simulate_layer` needs only sm, operand,
    kind, first, count and sectors)."""

    def __init__(self, plan: StreamPlan, max_sectors: int, lean: bool = False):
        self.plan = plan
        self.lean = bool(lean)
        prm = plan.params
        cap_sec = max(int(max_sectors), plan.step_sectors)
        cap_req = max(cap_sec // 4, plan.step_requests)
        slots_total = plan.sms * plan.slots
        tm, tn, tk = int(prm[_TM]), int(prm[_TN]), int(prm[_TK])
        nq_b = tn // max(int(prm[_RPW]), 1)
        self.maps = (np.ascontiguousarray(plan.seg_a[:, 0]), np.ascontiguousarray(plan.seg_a[:, 1:]),
                     plan.seg_a_start, np.ascontiguousarray(plan.seg_b[:, 0]),
                     np.ascontiguousarray(plan.seg_b[:, 1:]), plan.seg_b_start, plan.thr_a,
                     plan.perm_a, plan.perm_b, plan.fpos, plan.store_order)
        # np.empty: every entry is written before it is read (a slot's when a CTA starts in it)
        e, i8 = np.empty, np.int64
        self.state = np.zeros(6, dtype=i8)
        self.sched = (self.state, np.full(slots_total, -1, dtype=i8)) + tuple(e(slots_total, i8) for _ in range(5))
        # wgrad: B's segments in runs of filter positions, at most one per thread (C % vector == 0)
        pieces = int(prm[_THREADS]) if int(prm[_OP]) == OPS.index("wgrad") else 1
        self.rows = (e((slots_total, tm), i8), e((slots_total, tm), i8), e((slots_total, tm), i8),
                     e((slots_total, tm), i8), e((slots_total, tn), i8), e((slots_total, tn), i8),
                     e((slots_total, nq_b, 2), i8), e((slots_total, 2), i8), e((slots_total, pieces, 6), i8),
                     e((slots_total, len(plan.seg_b) + 1), i8))
        ra_a = e(tm, i8)                # A's row addresses in a k-step, also as a (1, tm) view
        self.scratch = (ra_a, e(len(plan.seg_a), i8), e(len(plan.seg_a), i8), e(len(plan.seg_b), i8),
                        e(len(plan.seg_b), i8), e(tk, i8), e(tk, i8), e(tk, i8), e(tk, i8), ra_a.reshape(1, tm))
        self.cap_req, self.cap_sec = cap_req, cap_sec

    def new_buffers(self):
        """Output buffers for `fill` (lean: None for round, cta and kstep), carved out of one
        allocation: numpy backs an allocation of 4 MiB or more with huge pages where the OS allows,
        so a fresh set costs a few page faults rather than thousands (measured on vgg16, a new set
        per layer: 21k -> 0.9k page faults, 3.4 -> 2.6 ns/sector)."""
        counts = [self.cap_req] * 8 + [self.cap_sec]
        kept = [not (self.lean and i in _LEAN_OMITS) for i in range(9)]
        spans = [-(-n * np.dtype(d).itemsize // 64) * 64 if k else 0
                 for n, d, k in zip(counts, _FIELD_DTYPES, kept)]
        block = np.empty(sum(spans) + 64, np.uint8)
        offset = -block.ctypes.data % 64                     # 64-byte aligned arrays
        bufs = []
        for n, dtype, k, span in zip(counts, _FIELD_DTYPES, kept, spans):
            bufs.append(block[offset:offset + n * np.dtype(dtype).itemsize].view(dtype) if k else None)
            offset += span
        return tuple(bufs)

    @property
    def done(self) -> bool:
        return bool(self.state[_ST_DONE])

    def fill(self, bufs) -> RequestChunk | None:
        """Fill `bufs` with the next chunk (views); None when the stream is exhausted."""
        if self.done:
            return None
        out = tuple(_NO_FIELD[i] if b is None else b for i, b in enumerate(bufs))
        nreq, nsec = _generate(self.plan.params, self.maps, self.sched, self.rows, self.scratch, out,
                               *generate_flags(self.plan.params))
        if nreq == 0:
            if self.done:
                return None
            raise ValueError("fill: buffers smaller than one CTA step (use new_buffers)")
        return RequestChunk(*(None if b is None else b[:nreq] for b in bufs[:8]), bufs[8][:nsec])


_FIELD_DTYPES = (np.int64, np.int32, np.int64, np.uint8, np.uint8, np.int32, np.int64, np.int32, np.int64)
_LEAN_OMITS = (0, 2, 5)                 # round, cta, kstep
# stand-ins for the fields a lean buffer set leaves out (length 0: the generator skips them)
_NO_FIELD = tuple(np.empty(0, d) if i in _LEAN_OMITS else None for i, d in enumerate(_FIELD_DTYPES))


def iter_request_chunks(layer: ConvLayer, gpu: GPU, kernel: KernelConfig,
                        max_sectors: int = 1 << 20) -> Iterator[RequestChunk]:
    """Yield the layer's whole request stream (DESIGN section 3) in chunks of at most ``max_sectors``
    sectors (raised to one CTA step's worst case if smaller). The arrays are views of one reused
    buffer set: copy what you keep before advancing the iterator."""
    if isinstance(max_sectors, bool) or not isinstance(max_sectors, (int, np.integer)) or max_sectors <= 0:
        raise ValueError(f"max_sectors must be a positive integer, got {max_sectors!r}")
    plan = plan_stream(layer, gpu, kernel)
    return _iterate(plan, int(max_sectors))


def _iterate(plan: StreamPlan, max_sectors: int) -> Iterator[RequestChunk]:
    gen = _Generator(plan, max_sectors)
    bufs = gen.new_buffers()
    while True:
        chunk = gen.fill(bufs)
        if chunk is None:
            return
        yield chunk
