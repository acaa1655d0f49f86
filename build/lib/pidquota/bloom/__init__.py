"""Layered, timestamped Bloom filters (KIP-936's caching layer). Pure Python, clock-free."""

from pidquota.bloom.layer import TimestampedBloomFilter
from pidquota.bloom.layered import MAX_BASE_CAPACITY, MIN_LAYER_CAPACITY, LayeredBloomFilter, layer_capacity

__all__ = [
    "MAX_BASE_CAPACITY",
    "MIN_LAYER_CAPACITY",
    "LayeredBloomFilter",
    "TimestampedBloomFilter",
    "layer_capacity",
]
