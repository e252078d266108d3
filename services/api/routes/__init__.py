"""The HTTP API's routes, one module per concern; each builds an `APIRouter` over a started `Daemon`."""
