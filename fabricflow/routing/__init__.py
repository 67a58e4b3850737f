"""fabricflow.routing: GPU-to-GPU flows -> padded :class:`~fabricflow.routing.routes.Routes`.

``route.route`` dispatches on the fabric's structure through the plain table
``route.routers()``; the routers share ``route_limits`` (memory constants, the unreachable
error) below the dispatcher. Importing this package imports no router.
"""
