"""fabricflow.routing: GPU-to-GPU flows -> padded :class:`~fabricflow.routing.routes.Routes`.

``route.route`` dispatches on the fabric's structure through the plain table
``route.routers()``; importing this package imports no router.
"""
