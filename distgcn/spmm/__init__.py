"""The distributed product Â·H: the halo plan and exchanger, the product with autograd, the halo gather,
the broadcast peer algorithm and the plan restricted to a minibatch."""
