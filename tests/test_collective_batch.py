"""Many collectives prepared at once: the same answers as one at a time."""

from __future__ import annotations

import numpy as np

from fabricflow.collective import (
    make_groups,
    prepare_collective,
    prepare_collectives,
    structure_cache,
)


def test_prepare_collectives_equals_one_at_a_time(small_rail_fabric):
    fabric = small_rail_fabric
    requests = [
        ("all_reduce", make_groups(fabric.num_gpus, 4, layout="contiguous")),
        ("reduce_scatter", make_groups(fabric.num_gpus, 16, layout="strided")),
        ("all_gather", make_groups(fabric.num_gpus, 16, layout="strided")),  # twin phases
        ("all_to_all", make_groups(fabric.num_gpus, 8, layout="strided")),
    ]
    structure_cache.clear()
    together = prepare_collectives(fabric, requests, routing="ecmp")
    structure_cache.clear()
    sizes = [2.0**16, 2.0**26]
    for (op, groups), batch in zip(requests, together, strict=True):
        alone = prepare_collective(fabric, op, groups, routing="ecmp")
        for a, b in zip(alone.evaluate(sizes), batch.evaluate(sizes), strict=True):
            assert (a.algorithm, a.protocol) == (b.algorithm, b.protocol)
            np.testing.assert_array_equal(a.group_time_s, b.group_time_s)
        for sa, sb in zip(alone.solved, batch.solved, strict=True):
            for pa, pb in zip(sa.phases, sb.phases, strict=True):
                np.testing.assert_array_equal(pa.rate, pb.rate)
                np.testing.assert_array_equal(pa.links, pb.links)
    # the reduce-scatter's and the all-gather's ring share one solve
    rs_ring = together[1].solved[0].phases[0]
    ag_ring = together[2].solved[0].phases[0]
    assert rs_ring.serial == ag_ring.serial >= 0 and rs_ring.links is ag_ring.links
