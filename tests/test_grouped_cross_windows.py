"""The next group's re-read of a pixel (`_grouped_rereads._cross_windows`, `tap_phases`, `_cyclic_miss`):
its window is the tile's pixels but those read only at the taps between the pixel's first and last read,
in the pixel's class of L1 sets (strided taps put their pixels in different sets), and the group's walk
replays itself, so the re-read is judged on the LRU step at the ways. Against simulation (default factors):
- mobilenet_v2 ``features.7.conv.1.0`` at batch 1 on the v100 (3x3 stride 2, C 192 fp32: taps s = 1 and
  s = 0, 2 in two different sets): A L1 misses +10.6 % before;
- seed 3 #77 (3x3 depthwise C 48 fp32, 3 CTAs an SM on a v100 with twice the L1, windows at x = 1.05): +29 %;
- seed 4 #99 (1x1 depthwise whose two CTAs fill the titanxp's ways exactly; the second CTA's column has half
  the groups, so it is there for 2 re-reads of 3, `_present_classes`; both columns' filter slices in one
  line, `_filter_blocks`): -28.5 %."""
import pytest

import analytic
import simcore
import traces
from simcore import metrics as M
from validation.random_cases import random_case

A_MISS = M.L1_LD_MISSES + ":A"


def test_strided_depthwise_taps_in_their_sets():
    layer = next(x for x in traces.network("mobilenet_v2", 1) if x.name == "features.7.conv.1.0")
    gpu, kernel = simcore.gpu("v100"), traces.KernelConfig()
    sim = traces.simulate_layer(layer, gpu, kernel)
    assert analytic.predict_layer(layer, gpu, kernel)[A_MISS] == pytest.approx(sim[A_MISS], rel=0.08)


@pytest.mark.parametrize("case, rel", [("3:77", 0.08), ("4:99", 0.25)])
def test_random_cases_at_the_ways(case, rel):
    c = random_case(*map(int, case.split(":")))
    sim = traces.simulate_layer(c.layer, c.gpu, c.kernel)
    assert analytic.predict_layer(c.layer, c.gpu, c.kernel)[A_MISS] == pytest.approx(sim[A_MISS], rel=rel)
