"""newsmon schemas: the Kafka wire events (``newsmon.schemas.events``) and their JSON Schema files (``json/``)."""

if __name__ != "newsmon.schemas":  # the folder is on sys.path (e.g. the repository root): refuse the bare name
    raise ImportError(f"import newsmon.schemas, not {__name__!r}: install the package (pip install -e .) and use "
                      "the newsmon.* names")

from newsmon.schemas.events import *  # noqa: E402,F401,F403
from newsmon.schemas.events import __all__  # noqa: E402,F401
