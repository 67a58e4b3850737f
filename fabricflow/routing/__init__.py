"""fabricflow.routing."""

# Structured routers register themselves with the dispatcher on import.
from . import clos as _clos  # noqa: E402,F401
from . import dragonfly as _dragonfly  # noqa: E402,F401
from . import torus as _torus  # noqa: E402,F401
