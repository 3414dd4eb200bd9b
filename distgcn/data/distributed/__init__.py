"""Reading one graph on P ranks at once, each rank holding only its share.

An edge list is read in P byte ranges cut at line ends (:mod:`.edge_list`), and
its arbitrary vertex ids are numbered 0..n-1 by all ranks together (:mod:`.ids`):
the same numbers one process gives, so a partition made either way is the same.
Each rank then builds its own rows of Â with the degrees its edges need from the
others (:mod:`.adjacency`). Every rank learns of bad input anywhere, as the same
one-line error.
"""
