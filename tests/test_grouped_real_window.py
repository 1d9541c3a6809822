"""`analytic._grouped_model._real_window_cliff`: the L2 cliff of the busy tiles' own window (the pixels their
taps read, in the order they first read them), against a slow enumeration of those pixels and a naive sliced
L2 (tests/naive_cache.py) swept twice over the window's first x L2s of lines."""
import math

from hypothesis import given, settings, strategies as st

from analytic._grouped_model import CONTIGUOUS_SHARE, WINDOW_CHUNKS, _real_window_cliff
from analytic._l2 import PATTERN_X
from traces import ConvLayer

from .test_l2_pattern import LINE, second_sweep_misses


def window_lines(layer, pitch, starts, width, rows, need):
    """Slow reference: chunks of ``rows`` GEMM rows (the busy tiles, then the next ones), at most
    `WINDOW_CHUNKS` of them, until ``need`` lines; in a chunk filter tap by tap (r, then s), row by row, each
    in-image pixel's lines of ``width`` bytes from each of ``starts``, a line listed where it is first reached.
    Then, where rows are left and fewer than ``need`` lines listed, those lines again moved on by their span.
    Also how many the first chunk lists."""
    out, seen, busy = [], set(), 0
    sh, sw = layer.stride
    ph, pw = layer.pad
    dh, dw = layer.dilation
    for lo in range(0, min(layer.gemm_m, WINDOW_CHUNKS * rows), rows):
        for r in range(layer.r):
            for s in range(layer.s):
                for m in range(lo, min(lo + rows, layer.gemm_m)):
                    img, pq = divmod(m, layer.p * layer.q)
                    p, q = divmod(pq, layer.q)
                    y, x = p * sh - ph + r * dh, q * sw - pw + s * dw
                    if not (0 <= y < layer.h and 0 <= x < layer.w):
                        continue
                    pixel = (img * layer.h + y) * layer.w + x
                    for start in starts:
                        first = pixel * pitch + start
                        for line in range(first // LINE, (first + width - 1) // LINE + 1):
                            if line not in seen:
                                seen.add(line)
                                out.append(line)
        busy = busy if lo else len(out)
        if len(out) >= need:
            break
    if busy and len(out) < need and WINDOW_CHUNKS * rows < layer.gemm_m:
        span, found = max(out) - min(out) + 1, list(out)
        copy = 1
        while len(out) < need:
            out += [line + copy * span for line in found]
            copy += 1
    return out, busy


@given(st.integers(1, 2), st.integers(3, 12), st.integers(3, 12), st.integers(1, 3), st.integers(1, 3),
       st.integers(1, 2), st.integers(1, 2), st.integers(0, 1), st.integers(1, 2), st.integers(1, 24),
       st.sampled_from([2, 4]), st.sampled_from([4, 8]), st.sampled_from([2, 4]), st.sampled_from(["xor", "linear"]),
       st.data())
@settings(max_examples=40, deadline=None)
def test_real_window_cliff_against_a_naive_l2(n, h, w, r, s, sh, sw, pad, dil, pitch32, slices, sets, ways,
                                               index, data):
    # pixels of any multiple of 32 bytes (192-byte pixels' blocks straddle a line in every other pixel)
    layer = ConvLayer(n=n, c=8, h=h + (r - 1) * dil, w=w + (s - 1) * dil, k=8, r=r, s=s, stride=(sh, sw),
                      pad=pad, dilation=dil, name="g")
    pitch = pitch32 * 32
    width = data.draw(st.integers(1, 2)) * LINE
    starts = tuple(sorted(set(data.draw(st.lists(st.integers(0, max(0, pitch // LINE - 1)), min_size=1,
                                                  max_size=3)))))
    starts = tuple(x * LINE for x in starts)
    rows = data.draw(st.integers(1, 40))
    cap = slices * sets * ways
    need = int(PATTERN_X[-1] * cap) + 1
    tab = _real_window_cliff(layer.shape, pitch, starts, width, LINE, rows, slices, sets, ways, index, float(cap))
    lines, busy = window_lines(layer, pitch, starts, width, rows, need)
    head = lines[:min(need, busy)]
    if tab is None:
        # the busy tiles read nothing, or their lines all but fill their span: the GPU's contiguous cliff holds
        assert not head or len(head) >= CONTIGUOUS_SHARE * (max(head) - min(head) + 1)
        return
    assert len(head) < CONTIGUOUS_SHARE * (max(head) - min(head) + 1)
    for i in data.draw(st.lists(st.integers(1, len(PATTERN_X) - 1), min_size=1, max_size=3)):
        count = min(max(1, int(PATTERN_X[i] * cap)), len(lines))
        want = second_sweep_misses(lines[:count], slices, sets, ways, index) / count
        assert math.isclose(tab[i], want, abs_tol=1e-12), (i, count, tab[i], want)


def test_a_strided_1x1_window_skips_the_lines_between():
    # 1x1 stride 2 over 4-line pixels (512 bytes), one line a pixel: the busy tiles read every other pixel
    # of every other row, one line in 8 along a row; stride 1 reads every pixel's first line, one in 4
    # (a pattern too, but regular): the strided window's first lines are 8 apart, the other's 4
    strided = ConvLayer(n=1, c=8, h=16, w=16, k=8, r=1, s=1, stride=2, name="s2")
    lines, _ = window_lines(strided, 512, (0,), LINE, 16, 10)
    assert lines[:4] == [0, 8, 16, 24]
    dense = ConvLayer(n=1, c=8, h=16, w=16, k=8, r=1, s=1, name="s1")
    assert window_lines(dense, 512, (0,), LINE, 16, 10)[0][:4] == [0, 4, 8, 12]
    # a 1-line pixel read whole at stride 1 is contiguous (no table); at stride 2 it is not
    args = (LINE, (0,), LINE, LINE, 64, 4, 8, 4, "xor", 128.0)
    assert _real_window_cliff(dense.shape, *args) is None
    assert _real_window_cliff(strided.shape, *args) is not None


def test_a_large_layer_reads_only_the_images_its_busy_tiles_reach():
    # 64 images of 300 x 300 pixels of 2,048 fp32 channels (369 M lines, 369 MB of flags if every line were tracked):
    # the busy tiles' four chunks reach the first image or two, and so does the memory
    import tracemalloc
    layer = ConvLayer(n=64, c=2048, h=300, w=300, k=2048, r=3, s=3, pad=1, groups=2048, name="big")
    tracemalloc.start()
    tab = _real_window_cliff(layer.shape, 8192, (0, 1024), LINE, LINE, 160 * 128, 80, 512, 16, "xor", 655360.0)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert tab is not None and peak < 256 * 2 ** 20
