"""newsmon: streaming label proposals for news articles (RAE-XMC over a Qdrant knowledge memory).

One import root, in layers that only import downwards:

* ``newsmon.schemas`` (folder ``schemas/``): the Kafka wire events and their JSON Schema files;
* ``newsmon.shared`` (folder ``shared/``): the method and its adapters (encoder, knowledge memory,
  predictors, evaluation, near-duplicate detection, settings);
* ``newsmon.training_jobs`` (``training_jobs/``) and ``newsmon.workers`` (``workers/``): the nightly job and
  the stream processes, which never import each other;
* ``newsmon`` itself (this folder): the command line, the demo and the Tansu broker helper.

``tests/test_layers.py`` checks the layers and the size limits.
"""

from pkgutil import extend_path

__version__ = "0.1.0"

# The Makefile installs in setuptools' strict editable mode: the package is a link tree in
# build/__editable__.*/newsmon that static tools (mypy, jedi) can read. From the repository root the folder
# newsmon/ comes first on sys.path and holds only the top layer: extending the package's path with every
# newsmon folder on sys.path finds newsmon.shared & co. in the link tree (for a regular install, a no-op).
__path__ = extend_path(__path__, __name__)
