"""Layouts shared by the generator's kernels and `traces.stream`: the parameter vector, the state
vector, the filter-position table, and two constants."""
from __future__ import annotations

import numpy as np

_BIG = 1 << 40          # sentinel h/w origin of an invalid row or gk (any h = origin + offset < 0)
_U = np.uint64          # index casts: unsigned indices skip Numba's negative-index wraparound code

# ---- parameter vector layout ----------------------------------------------------------------
(_N, _C, _H, _W, _K, _R, _S, _SH, _SW, _PH, _PW, _DH, _DW, _P, _Q, _M, _GK,
 _TM, _TN, _TK, _THREADS, _NCHW, _EB, _V,
 _TCA, _TSA, _IA, _TCB, _TSB, _IB,
 _SMS, _SLOTS, _TILES_M, _TILES_N, _SWZ, _NBLOCKS, _KSTEPS, _KBLK,
 _XB, _WB, _YB, _SSH, _STEP_REQ, _STEP_SEC, _UNI, _RPW, _ALN,
 _OP, _GN, _TMPF, _NPQ,
 _GPC, _CG, _KG, _KA, _KB, _SROWS, _SCOLS, _NPARAMS) = range(59)
# _GPC: groups a CTA walks through (grouped fprop, `traces.grouped`; 0: not grouped), _CG / _KG: channels /
# filters per group
# _KA, _KB: request kinds (`simcore.metrics.KIND_*`) of A's and B's loads; _SROWS x _SCOLS: tile rows and
# columns of one warp store request (`traces._tensorop.store_shape`)

# ops (_OP): the pass, as `KernelConfig.OPS` orders them
_FPROP, _DGRAD, _WGRAD = range(3)

# state vector: round, phase (0: refill due), cur_sm, cur_slot, next_block, done
_ST_ROUND, _ST_PHASE, _ST_SM, _ST_SLOT, _ST_NEXT, _ST_DONE = range(6)

# filter-position table (one row per starting filter position f of strided dgrad, else one row): the CTA
# does nothing (skip), start_r, start_s, start_h, start_w, positions along r and s, P' and Q' (rows per
# image of the remapped dx rows), k-steps
(_F_SKIP, _F_R0, _F_S0, _F_H0, _F_W0, _F_NR, _F_NS, _F_PP, _F_QQ, _F_KSTEPS, _F_COLS) = range(11)
