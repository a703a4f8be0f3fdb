"""newsmon schemas: the Kafka wire events (:mod:`.events`, one module per event, conventions in :mod:`.base`), reading them (:mod:`.parsing`), dead letters
(:mod:`.dead_letters`) and their JSON Schema files (``json/``, written by ``python -m newsmon.schemas.generate``).

Installed as ``newsmon.schemas``; the folder is never imported as a top-level ``schemas`` package.
"""

if __name__ != "newsmon.schemas":  # the folder is on sys.path (e.g. the repository root): refuse the bare name
    raise ImportError(f"import newsmon.schemas, not {__name__!r}: install the package (pip install -e .) and use "
                      "the newsmon.* names")

from newsmon.schemas.dead_letters import *  # noqa: E402,F401,F403
from newsmon.schemas.dead_letters import __all__ as _dead_letters_all  # noqa: E402
from newsmon.schemas.events import *  # noqa: E402,F401,F403
from newsmon.schemas.events import __all__ as _events_all  # noqa: E402
from newsmon.schemas.parsing import *  # noqa: E402,F401,F403
from newsmon.schemas.parsing import __all__ as _parsing_all  # noqa: E402

__all__ = [*_events_all, *_parsing_all, *_dead_letters_all]
