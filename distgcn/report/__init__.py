"""``distgcn report``: figures and a markdown summary from metrics files and partition directories.

:mod:`.inputs` reads what runs and partitions produced, :mod:`.figures`
draws with matplotlib (an optional dependency, imported only here),
:mod:`.summary` writes the markdown tables and :mod:`.command` ties them to
the command line.
"""
