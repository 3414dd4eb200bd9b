"""From a partition vector to each rank's shard: the shard format and its one communication plan, cutting, the
partition directory, writing it (offline or by the ranks), loading it and scattering it inside a job."""
