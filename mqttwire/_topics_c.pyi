# The Cython topic module has exactly the API of mqttwire._topics (tests/test_topics.py and
# tests/test_topic_tree.py run every test on both), so its stub is that module's types.
from ._topic_rules import Matches as Matches
from ._topics import TopicTree as TopicTree
from ._topics import parse_shared as parse_shared
from ._topics import topic_matches as topic_matches
from ._topics import validate_topic_filter as validate_topic_filter
from ._topics import validate_topic_name as validate_topic_name

__all__ = [
    "Matches",
    "TopicTree",
    "parse_shared",
    "topic_matches",
    "validate_topic_filter",
    "validate_topic_name",
]
