"""``python -m newsmon.cli``: the ``newsmon`` command."""

from newsmon.cli import main

main()
