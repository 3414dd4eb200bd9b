"""Files distgcn writes and reads back: the safe-write contract, npy/npz reading, schemas, checkpoints, metrics files."""
