"""The HTTP API (``newsmon serve``, FastAPI under uvicorn) for the moderation tool and analysts.

* :mod:`.service`: what it does without HTTP (:class:`ApiService`, :func:`build_service`);
* :mod:`.routes`: the ``/v1`` routes; :mod:`.models`: their bodies;
* :mod:`.app`: the application (auth, body limit, errors, health, metrics, OpenAPI);
* :mod:`.server`: running it under uvicorn, alone or beside the workers.
"""

from newsmon.api.app import create_app
from newsmon.api.service import ApiError, ApiService, build_service

__all__ = ["ApiError", "ApiService", "build_service", "create_app"]
