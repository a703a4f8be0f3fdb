"""newsmon training_jobs."""

if __name__ != "newsmon.training_jobs":  # the folder is on sys.path (e.g. the repository root): refuse the bare name
    raise ImportError(f"import newsmon.training_jobs, not {__name__!r}: install the package (pip install -e .) and use "
                      "the newsmon.* names")
