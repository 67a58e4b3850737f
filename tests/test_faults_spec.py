"""Fault injection for fabric specs, routing inputs, spec files and the build memory guard."""

from __future__ import annotations

import numpy as np
import pytest
from fabric_specs import fat_tree_spec

from fabricflow.errors import SpecError
from fabricflow.fabric.spec import build_fabric
from fabricflow.routing.route import route, routers
from fabricflow.routing.routes import Routes

# ----------------------------------------------------------------- Routes and route()

def test_routes_shape_errors_are_spec_errors():
    with pytest.raises(SpecError, match="coef"):
        Routes(np.zeros((2, 3)), np.zeros((2, 2)), np.zeros(2), np.ones(2), 4)
    with pytest.raises(SpecError, match="links"):
        Routes(np.zeros(3), None, np.zeros(3), np.ones(3), 4)


def test_routes_refuses_link_ids_outside_the_fabric():
    with pytest.raises(SpecError, match=r"0\.\.3"):
        Routes(np.array([[0, 4]]), None, np.zeros(1), np.ones(1), 4)
    with pytest.raises(SpecError, match="links"):
        Routes(np.array([[0, -2]]), None, np.zeros(1), np.ones(1), 4)


def test_unknown_routing_option_names_the_option_and_the_accepted_ones():
    fabric = build_fabric(fat_tree_spec(4))
    with pytest.raises(SpecError, match=r"\['bogus'\].*accepted: \['k', 'pxn'\]") as info:
        route(fabric, [0], [5], bogus=1)
    assert info.value.field == "bogus"
    assert route(fabric, [0], [5], policy="multipath", k=2).num_flows == 1


def test_router_table_is_explicit():
    table = routers()
    assert None in table and all(isinstance(options, tuple) for _, options in table.values())
