"""Exit statuses of the ``suffice`` command (documented in README.md)."""

EXIT_OK = 0  #: every record got a verdict
EXIT_FATAL = 1  #: nothing more could be judged: model missing, engine failed, unreadable output
EXIT_USAGE = 2  #: bad arguments or settings
EXIT_ITEM_ERRORS = 3  #: the run finished, but some records got error lines instead of verdicts
#: another suffice run is writing the output: nothing was read or written; the same
#: command works once that run has ended (a script can wait and retry on it, where 1 and
#: 2 need a person).  ``audit verify`` uses 4 for a tampered log: a different command.
EXIT_BUSY = 4
#: ``audit verify``/``audit anchor``: the log's chains do not verify (tampered).
EXIT_TAMPERED = 4
#: ``audit verify``: the log is intact but unkeyed, so only accidental edits were checked.
EXIT_UNKEYED = 5
