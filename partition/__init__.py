"""The partition stage: which rank owns each row of Â (graph, hypergraph and stochastic-hypergraph models) and
the exact communication a partition causes. Installed as :mod:`distgcn.partitioning`; it imports no runtime module."""
