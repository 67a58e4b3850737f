"""Fabric model: specs, generators, presets (host-side numpy)."""

from .fabric import Fabric
from .spec import build_fabric, list_presets, load_fabric, read_spec

__all__ = ["Fabric", "build_fabric", "list_presets", "load_fabric", "read_spec"]
