"""newsmon workers."""

if __name__ != "newsmon.workers":  # the folder is on sys.path (e.g. the repository root): refuse the bare name
    raise ImportError(f"import newsmon.workers, not {__name__!r}: install the package (pip install -e .) and use "
                      "the newsmon.* names")
