"""The subcommands of ``distgcn``, one module each."""
