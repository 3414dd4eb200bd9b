"""Moving data between ranks: transports (MPI, torch.distributed, in-process), launch detection, collectives,
gradient sync, agreement checks and the per-epoch communication counters."""
