"""Predicting one rank's peak memory before training: from a shard's sizes, or from a graph known by its size."""
