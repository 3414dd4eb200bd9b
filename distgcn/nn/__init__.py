"""The models as torch modules (GCN, GraphSAGE, GAT) over a pluggable aggregation, with keyed dropout and
sparse first-layer input."""
