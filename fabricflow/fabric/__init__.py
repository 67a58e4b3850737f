"""Fabric model: specs, generators, presets (host-side numpy)."""

from fabricflow.fabric.fabric import Fabric
from fabricflow.fabric.spec import build_fabric, list_presets, load_fabric, read_spec

__all__ = ["Fabric", "build_fabric", "list_presets", "load_fabric", "read_spec"]
