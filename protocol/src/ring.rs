//! Consistent-hash placement of rooms on shards (filled in by the cluster work).
