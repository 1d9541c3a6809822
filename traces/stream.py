"""The exact global-memory request stream of the CTA-tiled implicit-GEMM kernel (DESIGN section 3).

`iter_request_chunks(layer, gpu, kernel)` yields the stream in fixed-size chunks (`RequestChunk`):
every warp-level load/store request, in global issue order (dispatch passes, rounds, SMs, slots,
A then B requests of a k-step, then the CTA's stores), with the distinct 32-byte sectors each request
touches, ascending. The generator is a resumable Numba kernel: the scheduler state lives in a few
small arrays, so it fills a fixed-size buffer, returns, and continues where it stopped. Memory never
grows with the trace length.

Implementation notes (all exact, no approximation):

* A warp request is split into *segments*: runs of lanes with the same strided index and consecutive
  contiguous offsets. A segment's valid lanes cover one contiguous byte range (predicates along the
  contiguous dimension -- c < C, gk < C R S, k < K -- clip a prefix), so its sectors are one range.
  Only the nchw A operand (contiguous = output rows m, whose padding predicate differs per lane) and
  the nchw stores (rows may cross an image boundary) are generated lane by lane.
* Per-CTA row information (image offset, p*stride-pad, q*stride-pad) is computed once when a CTA is
  dispatched; an invalid row (m >= M) gets a large negative h-origin, so the padding test rejects it.
* A request's sectors are kept sorted and distinct by insertion into the output buffer (appends are
  the common case).
* The generator stops between CTA steps when the buffer cannot hold another step's worst case, so
  the buffer is at least one step's worth (``max_sectors`` is raised to that if smaller).
"""
from __future__ import annotations

from typing import Iterator, NamedTuple

import numba
import numpy as np

from simcore.gpus import GPU

from .kernel import KernelConfig
from .layer import ConvLayer

__all__ = ["RequestChunk", "iter_request_chunks", "tensor_bases", "StreamPlan", "plan_stream"]

TENSOR_ALIGN = 256
_BIG = 1 << 40          # sentinel h/w origin of an invalid row or gk (any h = origin + offset < 0)


class RequestChunk(NamedTuple):
    """One chunk of the request stream (arrays may be views of reused buffers: copy what you keep)."""

    round: np.ndarray      # int64, round of the request
    sm: np.ndarray         # int32
    cta: np.ndarray        # int64, linear block id
    operand: np.ndarray    # uint8, 0 A (input), 1 B (filter), 2 C (output)
    is_store: np.ndarray   # uint8
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


# ---- parameter vector layout ----------------------------------------------------------------
(_N, _C, _H, _W, _K, _R, _S, _SH, _SW, _PH, _PW, _DH, _DW, _P, _Q, _M, _GK,
 _TM, _TN, _TK, _THREADS, _NCHW, _EB, _V,
 _TCA, _TSA, _IA, _TCB, _TSB, _IB,
 _SMS, _SLOTS, _TILES_M, _TILES_N, _SWZ, _NBLOCKS, _KSTEPS, _KBLK,
 _XB, _WB, _YB, _SSH, _STEP_REQ, _STEP_SEC, _NPARAMS) = range(45)

# state vector: round, phase (0: refill due), cur_sm, cur_slot, next_block, done
_ST_ROUND, _ST_PHASE, _ST_SM, _ST_SLOT, _ST_NEXT, _ST_DONE = range(6)


class StreamPlan(NamedTuple):
    """Everything the compiled generator needs (validated, derived once per layer)."""

    params: np.ndarray
    seg_a: np.ndarray       # (segments, 3): strided offset, first and end contiguous offsets of each
    seg_a_start: np.ndarray # run of lanes of operand A; warp w's segments are seg_a_start[w:w+2]
    seg_b: np.ndarray
    seg_b_start: np.ndarray
    thr_a: np.ndarray       # (threads, 2): contiguous offset, strided offset of each thread for A
    slots: int
    sms: int
    step_requests: int
    step_sectors: int
    ksteps: int
    blocks: int


def _segments(tmap, threads: int):
    """Per warp, the runs of lanes sharing a strided index (contiguous offsets consecutive)."""
    rows, starts = [], [0]
    for warp in range(threads // 32):
        lane = 0
        while lane < 32:
            t = 32 * warp + lane
            so = t // tmap.t_c
            co_lo = (t % tmap.t_c) * tmap.vector
            end = lane
            while end < 32 and (32 * warp + end) // tmap.t_c == so:
                end += 1
            co_hi = ((32 * warp + end - 1) % tmap.t_c) * tmap.vector + tmap.vector
            rows.append((so, co_lo, co_hi))
            lane = end
        starts.append(len(rows))
    return np.array(rows, dtype=np.int64).reshape(-1, 3), np.array(starts, dtype=np.int64)


def check_types(layer, gpu, kernel) -> None:
    """Type checks shared by the simulator and the analytic model, plus kernel.check_layer(layer)."""
    if not isinstance(layer, ConvLayer):
        raise TypeError(f"layer must be a traces.ConvLayer, got {type(layer).__name__}")
    if not isinstance(gpu, GPU):
        raise TypeError(f"gpu must be a simcore.GPU, got {type(gpu).__name__}")
    if not isinstance(kernel, KernelConfig):
        raise TypeError(f"kernel must be a traces.KernelConfig, got {type(kernel).__name__}")
    kernel.check_layer(layer)


def check_inputs(layer, gpu, kernel) -> int:
    """Validate the arguments (clear Python errors before any compiled code); return CTAs per SM."""
    check_types(layer, gpu, kernel)
    slots = kernel.resident_ctas(gpu)          # raises if the kernel does not fit the GPU
    kernel.l1_config(gpu)                      # raises if no L1 is left
    if gpu.sector_bytes & (gpu.sector_bytes - 1):
        raise ValueError(f"GPU.sector_bytes must be a power of two, got {gpu.sector_bytes}")
    return slots


def plan_stream(layer: ConvLayer, gpu: GPU, kernel: KernelConfig) -> StreamPlan:
    slots = check_inputs(layer, gpu, kernel)
    nchw = kernel.layout == "nchw"
    ta, tb = kernel.thread_map_a, kernel.thread_map_b
    eb, v = kernel.elem_bytes, kernel.vector
    tiles_m = -(-layer.gemm_m // kernel.tile_m)
    tiles_n = -(-layer.k // kernel.tile_n)
    swz = kernel.swizzle_log
    blocks = (tiles_m << swz) * (-(-tiles_n // (1 << swz)))
    if nchw:
        kblk = -(-layer.gemm_k // kernel.tile_k)
        ksteps = kblk
    else:
        kblk = -(-layer.c // kernel.tile_k)
        ksteps = kblk * layer.r * layer.s
    sb = gpu.sector_bytes
    # sectors one lane can touch: a lane's bytes start at a multiple of v*eb (bases are 256-aligned,
    # nhwc channel offsets and C are multiples of v), so one sector when v*eb divides the sector
    lane_span = 1 if sb % (v * eb) == 0 else -(-(v * eb) // sb) + 1
    warps = kernel.warps
    kstep_req = warps * (ta.iterations + tb.iterations)
    if nchw:
        store_req = kernel.tile_n * (-(-kernel.tile_m // 32))
    else:
        store_req = kernel.tile_m * (-(-kernel.tile_n // 32))
    step_req = max(kstep_req, store_req)
    step_sec = max(kstep_req, store_req) * 32 * lane_span
    x_base, w_base, y_base = tensor_bases(layer, kernel)
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
    }
    for key, value in vals.items():
        params[key] = value
    seg_a, seg_a_start = _segments(ta, kernel.threads)
    seg_b, seg_b_start = _segments(tb, kernel.threads)
    t = np.arange(kernel.threads, dtype=np.int64)
    thr_a = np.stack([(t % ta.t_c) * ta.vector, t // ta.t_c], axis=1).astype(np.int64)
    return StreamPlan(params, seg_a, seg_a_start, seg_b, seg_b_start, thr_a, slots, gpu.sms,
                      step_req, step_sec, ksteps, blocks)


# ---- compiled kernel ----------------------------------------------------------------------------
@numba.njit(cache=True, inline="always")
def _insert(sectors, first, cnt, x):
    """Insert sector address x into the sorted, distinct run sectors[first:first+cnt]; return cnt."""
    end = first + cnt
    if cnt == 0 or sectors[end - 1] < x:
        sectors[end] = x
        return cnt + 1
    if sectors[end - 1] == x:
        return cnt
    i = end - 1
    while i >= first and sectors[i] > x:
        i -= 1
    if i >= first and sectors[i] == x:
        return cnt
    j = end
    while j > i + 1:
        sectors[j] = sectors[j - 1]
        j -= 1
    sectors[i + 1] = x
    return cnt + 1


@numba.njit(cache=True, inline="always")
def _insert_range(sectors, first, cnt, lo_byte, hi_byte, ssh):
    """Insert the sectors covering bytes [lo_byte, hi_byte] (inclusive)."""
    s0 = lo_byte >> ssh
    s1 = hi_byte >> ssh
    if cnt == 0 or sectors[first + cnt - 1] < s0 << ssh:
        x = s0
        while x <= s1:
            sectors[first + cnt] = x << ssh
            cnt += 1
            x += 1
        return cnt
    x = s0
    while x <= s1:
        cnt = _insert(sectors, first, cnt, x << ssh)
        x += 1
    return cnt


@numba.njit(cache=True, inline="always")
def _put(o_round, o_sm, o_cta, o_op, o_st, o_ks, o_first, o_count, i, rnd, sm, cta, op, st, ks, first, cnt):
    o_round[i] = rnd
    o_sm[i] = sm
    o_cta[i] = cta
    o_op[i] = op
    o_st[i] = st
    o_ks[i] = ks
    o_first[i] = first
    o_count[i] = cnt


@numba.njit(cache=True)
def _emit_segments(ra, seg_so, seg_lo, seg_hi, seg_start, warps, iters, t_s, ssh,
                   o_round, o_sm, o_cta, o_op, o_st, o_ks, o_first, o_count, o_sec,
                   rnd, sm, cta, op, ks, nreq, nsec):
    """Load requests of one operand in one k-step, segment by segment.

    ra[i]: byte address of strided row i's element 0 (-1: the row is predicated off);
    seg_lo/seg_hi[sg]: byte offsets of the first/last valid byte of segment sg (seg_hi < 0: none)."""
    sb = 1 << ssh
    mask = -sb
    for wp in range(warps):
        s0 = seg_start[wp]
        s1 = seg_start[wp + 1]
        for j in range(iters):
            js = j * t_s
            first = nsec
            cnt = 0
            last = -1                      # largest sector so far (the run is sorted)
            for sg in range(s0, s1):
                hi = seg_hi[sg]
                if hi < 0:
                    continue
                a = ra[seg_so[sg] + js]
                if a < 0:
                    continue
                x = (a + seg_lo[sg]) & mask
                xe = (a + hi) & mask
                if x > last:               # common case: append the segment's sectors
                    o_sec[first + cnt] = x
                    cnt += 1
                    while x < xe:
                        x += sb
                        o_sec[first + cnt] = x
                        cnt += 1
                    last = xe
                else:
                    cnt = _insert_range(o_sec, first, cnt, a + seg_lo[sg], a + hi, ssh)
                    last = o_sec[first + cnt - 1]
            if cnt > 0:
                _put(o_round, o_sm, o_cta, o_op, o_st, o_ks, o_first, o_count, nreq,
                     rnd, sm, cta, op, 0, ks, first, cnt)
                nreq += 1
                nsec += cnt
    return nreq, nsec


@numba.njit(cache=True, inline="always")
def _segment_offsets(seg_co, seg_lo, seg_hi, base, limit, extra, eb):
    """Byte offsets of each segment's valid part: contiguous index base+co in [base+co_lo, limit),
    plus ``extra`` bytes."""
    for sg in range(seg_co.shape[0]):
        lo = base + seg_co[sg, 0]
        hi = base + seg_co[sg, 1]
        if hi > limit:
            hi = limit
        if lo < hi:
            seg_lo[sg] = lo * eb + extra
            seg_hi[sg] = hi * eb - 1 + extra
        else:
            seg_lo[sg] = 0
            seg_hi[sg] = -1


@numba.njit(cache=True, nogil=True)
def _generate(prm, seg_a_so, seg_a_co, seg_a_start, seg_b_so, seg_b_co, seg_b_start, thr_a, state,
              slot_cta, slot_tm, slot_tn, slot_step, row_hb, row_wb, row_base, row_y, row_b,
              ra_a, sa_lo, sa_hi, sb_lo, sb_hi, kt_off, kt_rh, kt_sw,
              o_round, o_sm, o_cta, o_op, o_st, o_ks, o_first, o_count, o_sec):
    """Fill the output buffers from where `state` stopped; return (requests, sectors) written."""
    C = prm[_C]; H = prm[_H]; W = prm[_W]; K = prm[_K]; R = prm[_R]; S = prm[_S]
    SH = prm[_SH]; SW = prm[_SW]; PH = prm[_PH]; PW = prm[_PW]; DH = prm[_DH]; DW = prm[_DW]
    P = prm[_P]; Q = prm[_Q]; M = prm[_M]; GK = prm[_GK]
    TM = prm[_TM]; TN = prm[_TN]; TK = prm[_TK]; THREADS = prm[_THREADS]; NCHW = prm[_NCHW]
    EB = prm[_EB]
    TSA = prm[_TSA]; IA = prm[_IA]; TSB = prm[_TSB]; IB = prm[_IB]
    SMS = prm[_SMS]; SLOTS = prm[_SLOTS]; TILES_M = prm[_TILES_M]; TILES_N = prm[_TILES_N]
    SWZ = prm[_SWZ]; NBLOCKS = prm[_NBLOCKS]; KSTEPS = prm[_KSTEPS]
    XB = prm[_XB]; WB = prm[_WB]; YB = prm[_YB]; SSH = prm[_SSH]
    STEP_REQ = prm[_STEP_REQ]; STEP_SEC = prm[_STEP_SEC]
    WARPS = THREADS // 32
    PQ = P * Q
    HW = H * W
    RS = R * S
    CHW = C * HW
    RSC = RS * C
    req_cap = o_round.shape[0]
    sec_cap = o_sec.shape[0]
    swz_mask = (1 << SWZ) - 1
    grid_x = TILES_M << SWZ
    groups_n = (TN + 31) // 32
    groups_m = (TM + 31) // 32

    rnd = state[_ST_ROUND]
    phase = state[_ST_PHASE]
    cur_sm = state[_ST_SM]
    cur_slot = state[_ST_SLOT]
    nxt = state[_ST_NEXT]
    nreq = 0
    nsec = 0

    while True:
        if phase == 0:
            # ---- refill: passes over the SMs, each SM with a free slot takes the next block ----
            while True:
                took = False
                for sm in range(SMS):
                    free = -1
                    for sl in range(SLOTS):
                        if slot_cta[sm * SLOTS + sl] < 0:
                            free = sl
                            break
                    if free < 0:
                        continue
                    # next block whose tile lies inside the grid
                    tm = 0
                    tn = 0
                    while nxt < NBLOCKS:
                        bx = nxt % grid_x
                        by = nxt // grid_x
                        tm = bx >> SWZ
                        tn = (by << SWZ) + (bx & swz_mask)
                        if tm < TILES_M and tn < TILES_N:
                            break
                        nxt += 1
                    if nxt >= NBLOCKS:
                        break
                    idx = sm * SLOTS + free
                    slot_cta[idx] = nxt
                    slot_tm[idx] = tm
                    slot_tn[idx] = tn
                    slot_step[idx] = 0
                    nxt += 1
                    took = True
                    # per-row information of the new CTA's tile (once per CTA)
                    for i in range(TN):
                        k = tn * TN + i
                        row_b[idx, i] = WB + k * (GK if NCHW else RSC) * EB if k < K else -1
                    m0 = tm * TM
                    for i in range(TM):
                        m = m0 + i
                        if m < M:
                            n = m // PQ
                            pq = m - n * PQ
                            p = pq // Q
                            q = pq - p * Q
                            hb = p * SH - PH
                            wb = q * SW - PW
                            row_hb[idx, i] = hb
                            row_wb[idx, i] = wb
                            if NCHW:
                                row_base[idx, i] = n * CHW
                                row_y[idx, i] = n * K * PQ + pq
                            else:
                                row_base[idx, i] = XB + (n * HW + hb * W + wb) * C * EB
                                row_y[idx, i] = m * K
                        else:
                            row_hb[idx, i] = -_BIG
                            row_wb[idx, i] = -_BIG
                            row_base[idx, i] = 0
                            row_y[idx, i] = -1
                if not took or nxt >= NBLOCKS:
                    break
            any_busy = False
            for idx in range(SMS * SLOTS):
                if slot_cta[idx] >= 0:
                    any_busy = True
                    break
            if not any_busy:
                state[_ST_DONE] = 1
                state[_ST_ROUND] = rnd
                state[_ST_PHASE] = 0
                state[_ST_NEXT] = nxt
                return nreq, nsec
            phase = 1
            cur_sm = 0
            cur_slot = 0

        # ---- one round: every SM in order, each resident CTA in slot order takes one step ----
        while cur_sm < SMS:
            while cur_slot < SLOTS:
                idx = cur_sm * SLOTS + cur_slot
                cta = slot_cta[idx]
                if cta < 0:
                    cur_slot += 1
                    continue
                if nreq + STEP_REQ > req_cap or nsec + STEP_SEC > sec_cap:
                    state[_ST_ROUND] = rnd
                    state[_ST_PHASE] = phase
                    state[_ST_SM] = cur_sm
                    state[_ST_SLOT] = cur_slot
                    state[_ST_NEXT] = nxt
                    return nreq, nsec
                ks = slot_step[idx]
                hb_ = row_hb[idx]
                wb_ = row_wb[idx]
                base_ = row_base[idx]
                y_ = row_y[idx]
                n0 = slot_tn[idx] * TN
                if ks < KSTEPS:
                    if NCHW:
                        gk0 = ks * TK
                        for i in range(TK):
                            gk = gk0 + i
                            if gk < GK:
                                c = gk // RS
                                rs = gk - c * RS
                                r = rs // S
                                s = rs - r * S
                                kt_off[i] = c * HW
                                kt_rh[i] = r * DH
                                kt_sw[i] = s * DW
                            else:
                                kt_off[i] = 0
                                kt_rh[i] = -_BIG
                                kt_sw[i] = -_BIG
                        # A: contiguous = rows m (padding differs per lane), strided = gk: lane by lane
                        for wp in range(WARPS):
                            for j in range(IA):
                                first = nsec
                                cnt = 0
                                for lane in range(32):
                                    t = wp * 32 + lane
                                    mi = thr_a[t, 0]
                                    gi = thr_a[t, 1] + j * TSA
                                    h = hb_[mi] + kt_rh[gi]
                                    if h < 0 or h >= H:
                                        continue
                                    w = wb_[mi] + kt_sw[gi]
                                    if w < 0 or w >= W:
                                        continue
                                    a = XB + (base_[mi] + kt_off[gi] + h * W + w) * EB
                                    cnt = _insert(o_sec, first, cnt, (a >> SSH) << SSH)
                                if cnt > 0:
                                    _put(o_round, o_sm, o_cta, o_op, o_st, o_ks, o_first, o_count, nreq,
                                         rnd, cur_sm, cta, 0, 0, ks, first, cnt)
                                    nreq += 1
                                    nsec += cnt
                        # B: contiguous = gk, strided = filters k
                        _segment_offsets(seg_b_co, sb_lo, sb_hi, gk0, GK, 0, EB)
                    else:
                        cb = ks // RS
                        rs = ks - cb * RS
                        r = rs // S
                        s = rs - r * S
                        c0 = cb * TK
                        rdh = r * DH
                        sdw = s * DW
                        # A: contiguous = channels, strided = rows m
                        koff = (rdh * W + sdw) * C * EB      # row bases may be negative: fold it here
                        for i in range(TM):
                            h = hb_[i] + rdh
                            w = wb_[i] + sdw
                            ok = (h >= 0) & (h < H) & (w >= 0) & (w < W)
                            ra_a[i] = base_[i] + koff if ok else -1
                        _segment_offsets(seg_a_co, sa_lo, sa_hi, c0, C, 0, EB)
                        nreq, nsec = _emit_segments(ra_a, seg_a_so, sa_lo, sa_hi, seg_a_start, WARPS, IA, TSA,
                                                    SSH, o_round, o_sm, o_cta, o_op, o_st, o_ks, o_first,
                                                    o_count, o_sec, rnd, cur_sm, cta, 0, ks, nreq, nsec)
                        # B: contiguous = channels, strided = filters k
                        _segment_offsets(seg_b_co, sb_lo, sb_hi, c0, C, rs * C * EB, EB)
                    nreq, nsec = _emit_segments(row_b[idx], seg_b_so, sb_lo, sb_hi, seg_b_start, WARPS, IB, TSB,
                                                SSH, o_round, o_sm, o_cta, o_op, o_st, o_ks, o_first,
                                                o_count, o_sec, rnd, cur_sm, cta, 1, ks, nreq, nsec)
                    slot_step[idx] = ks + 1
                else:
                    # ---- stores of the CTA's tile, then retire ----
                    if NCHW:
                        for kk in range(TN):
                            k = n0 + kk
                            if k >= K:
                                break
                            koff = k * PQ
                            for g in range(groups_m):
                                first = nsec
                                cnt = 0
                                lo = g * 32
                                hi = lo + 32
                                if hi > TM:
                                    hi = TM
                                for mi in range(lo, hi):
                                    yo = y_[mi]
                                    if yo < 0:
                                        break
                                    a = YB + (yo + koff) * EB
                                    cnt = _insert(o_sec, first, cnt, (a >> SSH) << SSH)
                                if cnt > 0:
                                    _put(o_round, o_sm, o_cta, o_op, o_st, o_ks, o_first, o_count, nreq,
                                         rnd, cur_sm, cta, 2, 1, ks, first, cnt)
                                    nreq += 1
                                    nsec += cnt
                    else:
                        for mi in range(TM):
                            yo = y_[mi]
                            if yo < 0:
                                break
                            for g in range(groups_n):
                                klo = n0 + g * 32
                                if klo >= K:
                                    break
                                khi = klo + 32
                                if khi > n0 + TN:
                                    khi = n0 + TN
                                if khi > K:
                                    khi = K
                                first = nsec
                                cnt = _insert_range(o_sec, first, 0, YB + (yo + klo) * EB,
                                                    YB + (yo + khi) * EB - 1, SSH)
                                _put(o_round, o_sm, o_cta, o_op, o_st, o_ks, o_first, o_count, nreq,
                                     rnd, cur_sm, cta, 2, 1, ks, first, cnt)
                                nreq += 1
                                nsec += cnt
                    slot_cta[idx] = -1
                cur_slot += 1
            cur_slot = 0
            cur_sm += 1
        rnd += 1
        phase = 0


class _Generator:
    """Holds the plan, the scheduler state and one set of output buffers."""

    def __init__(self, plan: StreamPlan, max_sectors: int):
        self.plan = plan
        prm = plan.params
        cap_sec = max(int(max_sectors), plan.step_sectors)
        cap_req = max(cap_sec // 4, plan.step_requests)
        slots_total = plan.sms * plan.slots
        tm, tk = int(prm[_TM]), int(prm[_TK])
        self.state = np.zeros(6, dtype=np.int64)
        self.slot_cta = np.full(slots_total, -1, dtype=np.int64)
        self.slot_tm = np.zeros(slots_total, dtype=np.int64)
        self.slot_tn = np.zeros(slots_total, dtype=np.int64)
        self.slot_step = np.zeros(slots_total, dtype=np.int64)
        self.row_hb = np.zeros((slots_total, tm), dtype=np.int64)
        self.row_wb = np.zeros((slots_total, tm), dtype=np.int64)
        self.row_base = np.zeros((slots_total, tm), dtype=np.int64)
        self.row_y = np.zeros((slots_total, tm), dtype=np.int64)
        self.row_b = np.zeros((slots_total, int(prm[_TN])), dtype=np.int64)
        self.ra_a = np.zeros(tm, dtype=np.int64)
        self.sa_lo = np.zeros(len(plan.seg_a), dtype=np.int64)
        self.sa_hi = np.zeros(len(plan.seg_a), dtype=np.int64)
        self.sb_lo = np.zeros(len(plan.seg_b), dtype=np.int64)
        self.sb_hi = np.zeros(len(plan.seg_b), dtype=np.int64)
        self.seg_a_so = np.ascontiguousarray(plan.seg_a[:, 0])
        self.seg_a_co = np.ascontiguousarray(plan.seg_a[:, 1:])
        self.seg_b_so = np.ascontiguousarray(plan.seg_b[:, 0])
        self.seg_b_co = np.ascontiguousarray(plan.seg_b[:, 1:])
        self.kt_off = np.zeros(tk, dtype=np.int64)
        self.kt_rh = np.zeros(tk, dtype=np.int64)
        self.kt_sw = np.zeros(tk, dtype=np.int64)
        self.cap_req, self.cap_sec = cap_req, cap_sec

    def new_buffers(self):
        r, s = self.cap_req, self.cap_sec
        return (np.empty(r, np.int64), np.empty(r, np.int32), np.empty(r, np.int64), np.empty(r, np.uint8),
                np.empty(r, np.uint8), np.empty(r, np.int32), np.empty(r, np.int64), np.empty(r, np.int32),
                np.empty(s, np.int64))

    @property
    def done(self) -> bool:
        return bool(self.state[_ST_DONE])

    def fill(self, bufs) -> RequestChunk | None:
        """Fill `bufs` with the next chunk (views); None when the stream is exhausted."""
        if self.done:
            return None
        p = self.plan
        nreq, nsec = _generate(p.params, self.seg_a_so, self.seg_a_co, p.seg_a_start, self.seg_b_so,
                               self.seg_b_co, p.seg_b_start, p.thr_a, self.state,
                               self.slot_cta, self.slot_tm, self.slot_tn, self.slot_step,
                               self.row_hb, self.row_wb, self.row_base, self.row_y, self.row_b,
                               self.ra_a, self.sa_lo, self.sa_hi, self.sb_lo, self.sb_hi,
                               self.kt_off, self.kt_rh, self.kt_sw, *bufs)
        if nreq == 0:
            return None if self.done else self.fill(bufs)
        return RequestChunk(*(b[:nreq] for b in bufs[:8]), bufs[8][:nsec])


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
