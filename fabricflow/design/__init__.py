"""Fabric design: the space of candidate fabrics for a workload (:mod:`.space`) and the
search that builds, prices and times each one into a sweep store (:mod:`.search`,
``ff.design_fabric``)."""
