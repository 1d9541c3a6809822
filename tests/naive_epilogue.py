"""Naive reference of the epilogue's store order (DESIGN section 3a, traces/KERNELS.md), thread by thread.

A plain transcription of CUTLASS v3.5.1's ``DefaultThreadMapSimt`` -> ``OutputTileOptimalThreadMap``
(``initial_offset``, ``Iterations``, ``Delta``) and ``PredicatedTileIterator`` (``store`` loops and
``operator++``), every thread walked on its own, no closed forms. The warp arrangement is chosen by the
rule written in traces/KERNELS.md, written again here from that text.

`epilogue_requests(kernel)` returns the warp store requests of one CTA in issue order (store call,
warp, then the iterator's cluster / group / row / column loops), each a list of (tile_row, tile_col) of
its 32 lanes.
"""
from __future__ import annotations

import functools

__all__ = ["warp_arrangement", "epilogue_requests"]


def _squareness(a, b):
    return max(a, b) / min(a, b)


def warp_arrangement(tile_m, tile_n, warps, elem_bits):
    """(warps_m, warps_n) per traces/KERNELS.md, or None."""
    valid = []
    for warps_m in range(1, warps + 1):
        if warps % warps_m:
            continue
        warps_n = warps // warps_m
        if tile_m % warps_m or tile_n % warps_n or tile_n % 32:
            continue
        wm, wn = tile_m // warps_m, tile_n // warps_n
        threads_m = 8 if wm > wn else 4
        threads_n = 32 // threads_m
        if wm % threads_m or wn % threads_n:
            continue
        lane_m = min(128 // elem_bits, wm // threads_m)
        lane_n = min(128 // elem_bits, wn // threads_n)
        if (wm // threads_m) % lane_m or (wn // threads_n) % lane_n:
            continue
        if threads_m % warps_n:
            continue
        valid.append((_squareness(wm, wn), _squareness(warps_m, warps_n), -warps_m, warps_m, warps_n))
    if not valid:
        return None
    best = min(valid)
    return best[3], best[4]


@functools.lru_cache(maxsize=None)      # the same for every CTA of a kernel (callers only read it)
def epilogue_requests(kernel):
    tile_m, tile_n, threads = kernel.tile_m, kernel.tile_n, kernel.threads
    warps = threads // 32
    elem_bits = 8 * kernel.elem_bytes
    found = warp_arrangement(tile_m, tile_n, warps, elem_bits)
    if found is None:       # section 3's simplified order
        out = []
        for row in range(tile_m):
            for block in range(-(-tile_n // 32)):
                out.append([(row, block * 32 + lane) for lane in range(32) if block * 32 + lane < tile_n])
        return out
    warps_m, warps_n = found
    # ---- DefaultThreadMapSimt (default_thread_map_simt.h, default_mma_core_simt.h)
    warp_shape_m, warp_shape_n = tile_m // warps_m, tile_n // warps_n
    policy_rows = 8 if warp_shape_m > warp_shape_n else 4          # MmaSimtPolicy::WarpShape::kRow
    lane_mma_m = min(128 // elem_bits, warp_shape_m // policy_rows)  # LaneMmaShape::kM
    group_count = warp_shape_m // (policy_rows * lane_mma_m)
    iterations = lane_mma_m * group_count
    shape = dict(column=tile_n, row=1, group=policy_rows, cluster=warps_m, tile=1)
    count = dict(column=1, row=lane_mma_m, group=group_count, cluster=1, tile=iterations)
    warp_count = warps_m * warps_n
    assert warp_count * 32 == threads
    # ---- OutputTileOptimalThreadMap::Detail
    if shape["cluster"] > warp_count:
        it_cluster = shape["cluster"] // warp_count
        delta_cluster = shape["row"] * count["row"] * shape["group"] * count["group"] * shape["cluster"] // it_cluster
        wp_cluster = warp_count
        warps_for_groups = 1
    else:
        it_cluster, delta_cluster = 1, 1
        wp_cluster = warp_count // shape["cluster"]
        warps_for_groups = warp_count // shape["cluster"]
    if shape["group"] > warps_for_groups:
        it_group = shape["group"] // warps_for_groups
        delta_group = shape["row"] * count["row"] * shape["group"] // it_group
        wp_group = 1
        warps_for_rows = 1
    else:
        it_group, delta_group = 1, 1
        wp_group = warps_for_groups // shape["group"]
        warps_for_rows = warps_for_groups // shape["group"]
    assert not shape["row"] > warps_for_rows          # 1-D RowArrangement
    it_row, delta_row = 1, 1
    it_column, delta_column = shape["column"] // 32, 32
    access_width = 32
    access_rows = 1
    wp_row = 1

    def initial_offset(thread):
        warp, lane = thread // 32, thread % 32
        cluster_idx = warp // wp_cluster
        residual_cluster = warp % wp_cluster
        group_idx = residual_cluster // wp_group
        residual_group = residual_cluster % wp_group
        row_idx = residual_group // wp_row
        col_idx = residual_group % wp_row
        cluster_offset = cluster_idx * shape["row"] * count["row"] * shape["group"] * count["group"]
        group_offset = group_idx * shape["row"] * count["row"]
        row_offset = row_idx * it_row * access_rows
        column_offset = col_idx * it_column * access_width
        return (cluster_offset + group_offset + row_offset + lane // access_width,
                column_offset + lane % access_width)

    # ---- PredicatedTileIterator: per thread, thread_start_row and the state counters
    start = [list(initial_offset(t)) for t in range(threads)]
    state = [[0, 0, 0] for _ in range(threads)]
    calls = {}     # (call, warp, cluster, group, row, column) -> lanes' (row, col)
    for call in range(count["tile"]):
        for t in range(threads):
            for cl in range(it_cluster):
                for gr in range(it_group):
                    for ro in range(it_row):
                        row_offset = ro * delta_row + gr * delta_group + cl * delta_cluster
                        for co in range(it_column):
                            key = (call, t // 32, cl, gr, ro, co)
                            calls.setdefault(key, []).append((start[t][0] + row_offset,
                                                              start[t][1] + co * delta_column))
            # operator++
            st = state[t]
            st[0] += 1
            start[t][0] += shape["row"]
            if st[0] == count["row"]:
                st[0] = 0
                st[1] += 1
                start[t][0] += (shape["group"] - 1) * shape["row"] * count["row"]
                if st[1] == count["group"]:
                    st[1] = 0
                    st[2] += 1
                    start[t][0] += count["group"] * shape["group"] * count["row"] * shape["row"]
                    if st[2] == count["cluster"]:
                        st[2] = 0
                        start[t][0] += shape["group"] * shape["row"] * shape["cluster"] * shape["tile"]
    return [calls[key] for key in sorted(calls)]
