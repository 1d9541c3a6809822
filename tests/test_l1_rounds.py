"""A's L1 hits counted on an SM's rounds (`analytic._l1_rounds`): the compiled count against a plain-Python
sectored LRU over the naive request stream (tests/naive_stream.py), wave by wave from a cold L1, on
hypothesis-drawn small layers; and the model against the simulated hierarchy on a stem whose windows sit at the
L1's ways."""
import collections

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

import analytic
import simcore
import traces
from analytic._counts_grouped import block_classes
from analytic._l1_rounds import _COMPILED, a_hit_share, group_dims
from simcore import metrics as M
from tests.naive_stream import naive_stream


def lru_read(lines, line, sector, ways):
    """Read ``sector`` of ``line`` in one set (an OrderedDict line -> set of valid sectors, LRU first): hit or
    not; a tag miss evicts the set's LRU line and allocates the line with this sector alone."""
    if line in lines:
        lines.move_to_end(line)
        hit = sector in lines[line]
        lines[line].add(sector)
        return hit
    if len(lines) >= ways:
        lines.popitem(last=False)
    lines[line] = {sector}
    return False


def naive_wave_hits(layer, gpu, kernel, warm=0):
    """(A sector hits, A sector reads, B sector hits, B sector reads, A's lines a sweep of the taps misses, A's lines
    a sweep reads) over every SM and wave of the naive stream: each (SM, wave) from a cold L1 that first replays
    the SM's ``warm`` waves before (a wave's CTAs are those that start in one round; the SMs' waves start together),
    counting the wave's own reads only; a sweep is a k-step // (R S), its lines counted once a sweep and (SM, wave)
    past the first sweep, missed where some read of a sector of the line in it misses."""
    cfg = kernel.l1_config(gpu)
    sets = cfg.size_bytes // (cfg.ways * cfg.line_bytes)
    start = {}
    stream = [x for x in naive_stream(layer, gpu, kernel) if x[4] == 0]
    for rnd, _sm, cta, _op, _kind, _step, _secs in stream:
        start.setdefault(cta, rnd)
    wave_of = {rnd: i for i, rnd in enumerate(sorted(set(start.values())))}
    touches = collections.defaultdict(list)          # (SM, wave) -> (operand, sector address) in stream order
    for _rnd, sm, cta, op, _kind, step, secs in stream:
        touches[(sm, wave_of[start[cta]])].extend((op, addr, step) for addr in secs)
    counts = [0, 0, 0, 0]
    swept, swept_missed = set(), set()          # (SM, wave, sweep, line): A's lines a sweep reads, and misses
    for sm, wave in touches:
        cache = [collections.OrderedDict() for _ in range(sets)]
        for w in range(max(0, wave - warm), wave + 1):
            for op, addr, step in touches.get((sm, w), ()):
                line, sector = addr // cfg.line_bytes, (addr % cfg.line_bytes) // cfg.sector_bytes
                hit = lru_read(cache[line % sets], line, sector, cfg.ways)
                if w == wave:
                    counts[2 * op] += hit
                    counts[2 * op + 1] += 1
                    sweep = step // (layer.r * layer.s)
                    if op == 0 and sweep >= 1:
                        swept.add((sm, wave, sweep, line))
                        if not hit:
                            swept_missed.add((sm, wave, sweep, line))
    return tuple(counts) + (len(swept_missed), len(swept))


def round_args(layer, gpu, kernel):
    """`_round_hits`' arguments up to the samples: the layer's dims, the kernel's tile and map, the grid, the SM and
    its L1's sets and ways, and w's base."""
    cfg = kernel.l1_config(gpu)
    sets = cfg.size_bytes // (cfg.ways * cfg.line_bytes)
    cps = kernel.ctas_per_sm or kernel.resident_ctas(gpu)
    dims = np.array((layer.n, layer.h, layer.w, layer.c, layer.k, layer.p, layer.q, layer.r, layer.s,
                     *layer.stride, *layer.pad, *layer.dilation, *group_dims(layer, kernel)), np.int64)
    tiles_m = -(-layer.n * layer.p * layer.q // kernel.tile_m)
    tiles_n = -(-layer.k // kernel.tile_n)
    return (dims, kernel.tile_m, kernel.tile_n, kernel.tile_k, kernel.vector, kernel.threads, kernel.elem_bytes,
            tiles_m, tiles_n, kernel.swizzle_log, gpu.sms, cps, gpu.line_bytes, gpu.sector_bytes, sets, cfg.ways,
            traces.tensor_bases(layer, kernel)[1])


def counted_hits(layer, gpu, kernel, samples, warm=0):
    classes = block_classes(layer, kernel, gpu.line_bytes)[1] if layer.groups > 1 else np.zeros(0, np.int64)
    got = _COMPILED["hits"](*round_args(layer, gpu, kernel), samples, 10 ** 12, warm, classes)
    # the sweeps' lines summed over the classes of channel blocks
    return tuple(got[:4]) + (int(got[4].sum()), int(got[5].sum()))


def build_case(layer_kw, kernel_kw, sms, l1):
    """(layer, kernel, GPU) of a drawn case (a p100 with ``sms`` SMs and ``l1`` bytes of L1 / shared memory), or
    hypothesis' rejection where the kernel cannot run it."""
    try:
        layer = traces.ConvLayer(**layer_kw)
        kernel = traces.KernelConfig(**kernel_kw)
        gpu = simcore.replace_gpu(simcore.gpu("p100"), sms=sms, l1_smem_bytes=l1)
        if layer.groups > 1:
            traces.grouped.check_grouped(layer, kernel)
        kernel.l1_config(gpu)
        kernel.resident_ctas(gpu)
    except ValueError:
        assume(False)
    return layer, kernel, gpu


def assert_counted_is_naive(layer, kernel, gpu):
    """Every (wave, SM) pair once: the count is the naive stream's, wave by wave from a cold L1, and with the
    waves before replayed first."""
    tiles_m = -(-layer.n * layer.p * layer.q // kernel.tile_m)
    waves = -(-tiles_m * -(-layer.k // kernel.tile_n) // (gpu.sms * kernel.ctas_per_sm))
    for warm in (0, 2):
        assert tuple(counted_hits(layer, gpu, kernel, waves * gpu.sms, warm)) == naive_wave_hits(layer, gpu, kernel,
                                                                                                 warm)


@settings(max_examples=25, deadline=None)
@given(c=st.integers(1, 12), hw=st.tuples(st.integers(4, 13), st.integers(4, 13)), k=st.integers(1, 40),
       rs=st.tuples(st.integers(1, 4), st.integers(1, 4)), stride=st.integers(1, 3), pad=st.integers(0, 2),
       dil=st.integers(1, 2), n=st.integers(1, 2), tiles=st.sampled_from([(32, 32, 8), (32, 64, 8), (64, 32, 16)]),
       threads=st.sampled_from([32, 64, 128]), vector=st.sampled_from([1, 2, 4]),
       dtype=st.sampled_from(["fp32", "fp16"]), swz=st.integers(0, 2), sms=st.integers(1, 5),
       cps=st.integers(1, 4), l1=st.sampled_from([1024, 2048, 4096]))
def test_counted_hits_are_the_naive_streams(c, hw, k, rs, stride, pad, dil, n, tiles, threads, vector, dtype, swz,
                                             sms, cps, l1):
    assume(c % vector == 0)
    assert_counted_is_naive(*build_case(
        dict(n=n, c=c, h=hw[0], w=hw[1], k=k, r=rs[0], s=rs[1], stride=(stride, stride), pad=(pad, pad),
             dilation=(dil, dil), name="t"),
        dict(tile_m=tiles[0], tile_n=tiles[1], tile_k=tiles[2], threads=threads, vector=vector, dtype=dtype,
             swizzle_log=swz, ctas_per_sm=cps), sms, l1))


@settings(max_examples=20, deadline=None)
@given(groups=st.sampled_from([2, 3, 4, 8]), cg=st.sampled_from([1, 2, 3, 4, 8]),
       kg=st.sampled_from([1, 2, 4, 8, 32, 64]), hw=st.tuples(st.integers(4, 10), st.integers(4, 10)),
       rs=st.tuples(st.integers(1, 3), st.integers(1, 3)),
       stride=st.integers(1, 2), n=st.integers(1, 2), tiles=st.sampled_from([(32, 32, 8), (32, 64, 8), (64, 32, 16)]),
       threads=st.sampled_from([32, 64]), vector=st.sampled_from([1, 2]), dtype=st.sampled_from(["fp32", "fp16"]),
       swz=st.integers(0, 2), sms=st.integers(1, 4), cps=st.integers(1, 3), l1=st.sampled_from([1024, 2048]))
def test_grouped_counted_hits_are_the_naive_streams(groups, cg, kg, hw, rs, stride, n, tiles, threads, vector, dtype,
                                                     swz, sms, cps, l1):
    """Grouped and depthwise layers (kSingleGroup and kMultipleGroup: a CTA walking tile_n / K_g groups, A's
    channels read past the group's end below C, B's rows of one group a step)."""
    assert_counted_is_naive(*build_case(
        dict(n=n, c=cg * groups, h=hw[0], w=hw[1], k=kg * groups, r=rs[0], s=rs[1], stride=(stride, stride),
             pad=(1, 1), groups=groups, name="g"),
        dict(tile_m=tiles[0], tile_n=tiles[1], tile_k=tiles[2], threads=threads, vector=vector, dtype=dtype,
             swizzle_log=swz, ctas_per_sm=cps), sms, l1))


def test_sampling_covers_the_grid():
    """Fewer samples than (wave, SM) pairs: each a pair of the grid, spread over it (bit-reversed lattice order):
    the share stays within a few points of the whole count."""
    layer = traces.ConvLayer(n=16, c=5, h=31, w=41, k=24, r=7, s=7, stride=(2, 2), pad=(3, 3), name="stem")
    kernel = traces.KernelConfig(tile_m=32, tile_n=64, tile_k=8, threads=64, ctas_per_sm=4)
    gpu = simcore.replace_gpu(simcore.gpu("p100"), sms=6)
    full = counted_hits(layer, gpu, kernel, 10 ** 6)
    part = counted_hits(layer, gpu, kernel, 16)
    assert part[1] < full[1]
    assert abs(part[0] / part[1] - full[0] / full[1]) < 0.05


def test_only_fprop_nhwc_simt_sub_line_pixels_or_groups_are_counted():
    gpu = simcore.gpu("v100")
    stem = traces.ConvLayer(n=2, c=3, h=32, w=32, k=16, r=7, s=7, pad=(3, 3), name="stem")
    wide = traces.ConvLayer(n=2, c=64, h=16, w=16, k=64, r=3, s=3, pad=(1, 1), name="wide")
    simt = traces.KernelConfig(tile_m=64, tile_n=32, tile_k=8, threads=64)
    from analytic._geometry import geometry
    cps, ways, sets = analytic.model._machine(gpu, simt)
    assert 0.0 <= a_hit_share(geometry(stem, simt), stem, simt, gpu, cps, ways, sets) <= 1.0
    # 256-byte pixels are whole lines: the model's own windows
    assert a_hit_share(geometry(wide, simt), wide, simt, gpu, cps, ways, sets) is None
    nchw = traces.KernelConfig(tile_m=64, tile_n=32, tile_k=8, threads=64, layout="nchw")
    assert a_hit_share(geometry(stem, nchw), stem, nchw, gpu, cps, ways, sets) is None
    # dgrad's are counted on the kernel's own stream (`_l1_sampled`)
    dgrad = traces.KernelConfig(tile_m=64, tile_n=32, tile_k=8, threads=64, op="dgrad")
    assert 0.0 <= a_hit_share(geometry(stem, dgrad), stem, dgrad, gpu, cps, ways, sets) <= 1.0
    # grouped layers with taps are counted whatever their pixels (a depthwise 3x3 of 256-byte pixels), 1x1 not
    from analytic._grouped_model import dense_equivalent
    for layer, counted in ((traces.ConvLayer(n=2, c=64, h=16, w=16, k=64, r=3, s=3, pad=(1, 1), groups=64, name="dw"),
                            True),
                           (traces.ConvLayer(n=2, c=64, h=16, w=16, k=64, r=1, s=1, groups=64, name="pw"), False)):
        share = a_hit_share(dense_equivalent(layer, simt)[1], layer, simt, gpu, cps, ways, sets)
        assert (share is not None) == counted and (share is None or 0.0 <= share <= 1.0)


def test_stem_at_the_l1_ways_against_simulation():
    """6 #53's stem (C 5 fp32, 7x7 stride 4, eight 32-row CTAs an SM on a p100's 24 KB L1) on fewer images: its
    rounds sit at 0.93-1.0 of the ways, where the mean window said every re-read one tap back hits (A's L1 hits
    +77.6 %, L2 reads -52.5 % on the random case; on these 8 images +121.2 % and -58.2 %); the SMs' counted rounds
    give the simulator's hits (+0.5 %, L2 reads -0.4 %)."""
    layer = traces.ConvLayer(n=8, c=5, h=143, w=200, k=24, r=7, s=7, stride=(4, 4), pad=(3, 3), name="stem")
    kernel = traces.KernelConfig(tile_m=32, tile_n=64, tile_k=8, threads=64)
    gpu = simcore.scale_gpu(simcore.gpu("p100"), {"l2_bytes": 1.5})
    sim = traces.simulate_layer(layer, gpu, kernel)
    pred = analytic.predict_layer(layer, gpu, kernel)
    for key in (f"{M.L1_LD_HITS}:A", M.L2_RD_SECTORS):
        assert pred[key] == pytest.approx(sim[key], rel=0.06), key


def test_depthwise_stem_against_simulation():
    """3 #152's depthwise stem (C 7 fp16, 7x7 stride 4, kMultipleGroup: a CTA walks 128 groups, of which the layer
    holds 7) on 3 images and 40 SMs: the grouped model's L1 windows said 97.3 % of A's reads hit, the simulator
    94.9 % (L2 reads -47.5 %); the counted rounds give the simulator's hits."""
    layer = traces.ConvLayer(n=3, c=7, h=224, w=114, k=7, r=7, s=7, stride=(4, 4), pad=(3, 3), groups=7, name="dw")
    kernel = traces.KernelConfig(tile_m=256, tile_n=128, tile_k=32, threads=64, dtype="fp16")
    gpu = simcore.replace_gpu(simcore.scale_gpu(simcore.gpu("h100"), {"l2_bytes": 0.25}), sms=40)
    sim = traces.simulate_layer(layer, gpu, kernel)
    pred = analytic.predict_layer(layer, gpu, kernel)
    for key in (f"{M.L1_LD_HITS}:A", M.L2_RD_SECTORS, M.DRAM_RD_SECTORS):
        assert pred[key] == pytest.approx(sim[key], rel=0.03), key


def test_grouped_filter_hits_against_simulation():
    """64 #146's shape (a 3x3 dilation-3 g2 layer of 256 fp16 channels a group, 32 filters, one 256-column CTA
    walking both groups) on 6 images and 20 SMs: a CTA's filter slice is read again by the later CTAs of its column
    on the SM, so B hits the L1 where the grouped engine's one-slice-a-CTA estimate said it did not (B's L1 hits
    +82.9 %, L2 reads -24.0 % before the eighteenth session). B's share counted after the SM's waves before gives the
    simulator's B hits and L2 reads."""
    layer = traces.ConvLayer(n=6, c=512, h=17, w=17, k=32, r=3, s=3, pad=(3, 3), dilation=(3, 3), groups=2, name="g2")
    kernel = traces.KernelConfig(tile_m=32, tile_n=256, tile_k=8, threads=256, dtype="fp16", vector=1, swizzle_log=3)
    gpu = simcore.replace_gpu(simcore.gpu("v100"), sms=20)
    sim = traces.simulate_layer(layer, gpu, kernel)
    pred = analytic.predict_layer(layer, gpu, kernel)
    for key in (f"{M.L1_LD_HITS}:A", f"{M.L1_LD_HITS}:B", M.L2_RD_SECTORS, M.DRAM_RD_SECTORS):
        assert pred[key] == pytest.approx(sim[key], rel=0.03), key
