"""Minibatch subgraph samplers: a single-process reference, and the distributed samplers on the host or a device.

* :mod:`.reference`: the single-process GraphSAINT samplers (node, edge, rw,
  frontier) over the whole Â, drawing from a ``numpy.random.Generator`` as
  published (N draws with replacement, r uniform roots, m uniform starts),
  with GraphSAINT's normalization. The stochastic hypergraph model
  (``partition --model stochastic``, :mod:`distgcn.partitioning.stochastic`) samples its
  nets with them, ``benchmarks/samplers.py`` measures them, and
  tests/sampling/test_sampling.py pins their distributions. numpy and scipy only.
* :mod:`.distributed`: each rank's part of the same four samplers, used by
  minibatch training (:mod:`distgcn.training`) over the 1D row partition,
  where no rank holds Â. Every choice is a keyed hash of global ids
  (:mod:`distgcn.hashing`, keys in :mod:`.distributed.keys`) rather than a
  generator draw, so a batch is a function of (seed, epoch, batch): the same
  for every P and partition, and replayed on resume with no sampler state.

* :mod:`.device`: the distributed samplers again as torch operations on the
  rank's device (its GPU with NCCL), drawing exactly the same batches; chosen
  by ``train --sample-on`` (docs/minibatch.md, "Where samplers run").

Why the first two differ: a generator's sequential draws cannot be shared out among ranks
without sending them or the graph; hashed decisions can, but they change the
draw itself. Node and edge include each vertex or entry independently,
Poisson(N·P) draws instead of N draws with replacement; rw roots
Poisson(r/n) walks per vertex instead of exactly r; frontier starts from the
m smallest hashes. So the two do not draw the same batches for a seed, not
even on one rank. What they share:

* the weights: a distributed node batch holds v with probability
  1 − exp(−N·P(v)), P(v) the reference node sampler's ``probabilities``
  (edge: the same with ⌈N/2⌉ draws and the reference's P(v, u));
* the walk step: from v with uniform u, both go to the ⌊u·deg(v)⌋-th
  off-diagonal in-neighbour of row v in increasing id order (the reference's
  ``SamplingGraph.neighbor``, the distributed ``WalkRows.step``);
* the frontier pop: an integer target in the Fenwick tree of
  :mod:`.reference.dashboard` over the walkers' degrees;
* GraphSAINT's normalization: the formulas of :mod:`.reference.normalization`
  (counts floored at 1), with the counts kept by the rows' owners
  (:mod:`.distributed.normalization`).

The first two are checked in tests/sampling/test_sampling.py. Every distributed
sampler draws, for every P, what the whole-graph oracle of
tests/oracles/minibatch_reference.py draws with the same keys (tests/training/test_minibatch.py,
tests/training/test_minibatch_walks.py).

Dependencies run one way: :mod:`.device` imports :mod:`.distributed` (whose
setup it copies), :mod:`.distributed` imports :mod:`.reference` (the Fenwick
tree), none imports :mod:`distgcn.training`, and this file
imports neither, so the sampler flags that ``partition`` and ``train`` share
(:mod:`distgcn.cli.sampler_options`) load without torch.
"""
