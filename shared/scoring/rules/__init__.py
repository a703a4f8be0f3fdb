"""The decision rules, registered by name (:mod:`.base`), one module each; the built-in ones in the order they
were added."""

from newsmon.shared.scoring.rules.base import (RULES, DecisionRule, DecisionState, code_of, get_rule,  # noqa: I001
                                               register_rule, rules, unregister_rule)
from newsmon.shared.scoring.rules import threshold, label_count, set_vote, tail_support  # noqa: F401
from newsmon.shared.scoring.rules import new_label_support, floor, abstain  # noqa: F401

__all__ = ["RULES", "DecisionRule", "DecisionState", "code_of", "get_rule", "register_rule", "rules",
           "unregister_rule"]
