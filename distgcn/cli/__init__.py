"""The subcommands of ``distgcn``, one module each: ``add_parser(subparsers)`` and ``run(args) -> int``."""
