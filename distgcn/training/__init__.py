"""Training on one rank: the pipeline of a run, the trainer's epochs, full-batch and minibatch step sources,
and what a run returns."""
