"""The score components mixed into the RAE-XMC scores, registered by name (:mod:`.base`), one module each."""

from newsmon.shared.scoring.components.base import (MemoryArticles, Queries, ScoreComponent,  # noqa: I001
                                                    components, get_component, register_component)
from newsmon.shared.scoring.components import label_keys, head_model, label_tree, label_names  # noqa: F401

__all__ = ["MemoryArticles", "Queries", "ScoreComponent", "components", "get_component", "register_component"]
