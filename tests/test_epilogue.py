"""The epilogue's store order (DESIGN section 3a, traces/KERNELS.md): `traces.epilogue` against DESIGN's
numbers, against CUTLASS's SIMT tile list, and against the thread-by-thread reference."""
from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.naive_epilogue import epilogue_requests, warp_arrangement
from traces import KernelConfig
from traces.epilogue import epilogue_map, simt_warp_arrangement, store_row_order


def test_default_kernel_matches_design():
    """SIMT 128x128x8, 8 warps of 32x64: warps start at tile rows 0, 4, 32, 36, 64, 68, 96, 100; store call
    i covers warp-relative rows (i mod 4) + 16 (i / 4) and that + 8, four column blocks 32 apart each."""
    kernel = KernelConfig()
    starts = [0, 4, 32, 36, 64, 68, 96, 100]
    design = [(start + (i % 4) + 16 * (i // 4) + extra, block)
              for i in range(8) for start in starts for extra in (0, 8) for block in range(4)]
    naive = epilogue_requests(kernel)
    assert len(naive) == len(design) == 128 * 4
    for lanes, (row, block) in zip(naive, design):
        assert lanes == [(row, 32 * block + lane) for lane in range(32)]
    assert store_row_order(kernel).tolist() == [row for row, block in design[::4]]
    assert simt_warp_arrangement(kernel) == (4, 2, 32, 64)


# CUTLASS's SIMT tiles (python/cutlass_library/generator.py, GenerateSM50_Simt and GenerateSM80_Simt_f32):
# threadblock tile, warp count
CUTLASS_SIMT = [((128, 128), (4, 2)), ((128, 64), (2, 2)), ((64, 128), (2, 2)), ((64, 64), (2, 1)),
                ((128, 32), (2, 1)), ((32, 128), (1, 2)), ((256, 128), (4, 2)), ((128, 256), (2, 4))]


@pytest.mark.parametrize("tile, warps", CUTLASS_SIMT)
def test_warp_arrangement_reproduces_cutlass_simt_tiles(tile, warps):
    kernel = KernelConfig(tile_m=tile[0], tile_n=tile[1], threads=32 * warps[0] * warps[1])
    found = simt_warp_arrangement(kernel)
    assert found[:2] == warps and found[2:] == (tile[0] // warps[0], tile[1] // warps[1])
    assert warp_arrangement(tile[0], tile[1], warps[0] * warps[1], 32) == warps


def check_order(kernel):
    order = store_row_order(kernel).tolist()
    assert sorted(order) == list(range(kernel.tile_m))            # every tile row exactly once
    requests = epilogue_requests(kernel)
    blocks = -(-kernel.tile_n // 32)
    assert len(requests) == kernel.tile_m * blocks
    rows = []
    for i, lanes in enumerate(requests):       # one row, 32 consecutive columns (clipped to the tile)
        row, col = lanes[0]
        assert lanes == [(row, col + lane) for lane in range(len(lanes))] and col == 32 * (i % blocks)
        if i % blocks == 0:
            rows.append(row)
        else:
            assert row == rows[-1]
    assert rows == order


@pytest.mark.parametrize("tile, warps", CUTLASS_SIMT)
@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_cutlass_tiles_match_reference(tile, warps, dtype):
    check_order(KernelConfig(tile_m=tile[0], tile_n=tile[1], threads=32 * warps[0] * warps[1], dtype=dtype))


@settings(max_examples=150, deadline=None)
@given(tile_m=st.integers(1, 16).map(lambda x: 16 * x), tile_n=st.sampled_from([8, 16, 32, 48, 64, 96, 128, 256]),
       warps=st.sampled_from([1, 2, 3, 4, 6, 8]), dtype=st.sampled_from(["fp32", "fp16"]))
def test_any_tile_matches_reference(tile_m, tile_n, warps, dtype):
    # the order depends on tile_m, tile_n, warps and dtype only; any tile_k whose thread maps fit will do
    kernel = _kernel(tile_m, tile_n, warps, dtype)
    assume(kernel is not None)
    check_order(kernel)
    found = epilogue_map(kernel)
    if found is not None:                       # CUTLASS's checks hold
        assert found.warps_m * found.warps_n == warps and tile_n % 32 == 0
        assert found.warp_m * found.warps_m == tile_m and found.threads_m % found.warps_n == 0


def _kernel(tile_m, tile_n, warps, dtype):
    threads = 32 * warps
    for tile_k in (8, 16, 32, 48, 64):
        try:
            return KernelConfig(tile_m=tile_m, tile_n=tile_n, tile_k=tile_k, threads=threads, dtype=dtype)
        except ValueError:
            continue
    return None
