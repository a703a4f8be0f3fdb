"""newsmon.shared: the method and its adapters (encoder, knowledge memory, predictors, evaluation, settings)."""

if __name__ != "newsmon.shared":  # the folder is on sys.path (e.g. the repository root): refuse the bare name
    raise ImportError(f"import newsmon.shared, not {__name__!r}: install the package (pip install -e .) and use "
                      "the newsmon.* names")
