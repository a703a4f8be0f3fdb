"""The score components mixed into the RAE-XMC scores, registered by name (:mod:`.base`), one module each
(stacking last: it reads the others)."""

from newsmon.shared.scoring.components.base import (COMPONENTS, MemoryArticles, MixContext, Queries,  # noqa: I001
                                                    ScoreComponent, components, get_component, register_component,
                                                    unregister_component)
from newsmon.shared.scoring.components import label_keys, head_model, label_tree, label_names  # noqa: F401
from newsmon.shared.scoring.components import stacking  # noqa: F401

__all__ = ["COMPONENTS", "MemoryArticles", "MixContext", "Queries", "ScoreComponent", "components", "get_component",
           "register_component", "unregister_component"]
