"""newsmon schemas: the Kafka wire events (``schemas.events``) and their JSON Schema files (``schemas/json``)."""

from schemas.events import *  # noqa: F401,F403
from schemas.events import __all__  # noqa: F401
