"""Local compute kernels behind the runtime: sparse × dense products, dense products, keyed dropout, the loss
and argmax passes, and the memory they write into."""
