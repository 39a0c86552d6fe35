"""Exit statuses of the ``suffice`` command (documented in README.md)."""

EXIT_OK = 0  #: every record got a verdict
EXIT_FATAL = 1  #: nothing more could be judged: model missing, engine failed, unreadable output
EXIT_USAGE = 2  #: bad arguments or settings
EXIT_ITEM_ERRORS = 3  #: the run finished, but some records got error lines instead of verdicts
