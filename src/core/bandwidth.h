// The machine's memory read bandwidth, measured the way attention reads the cache: a streaming
// sum over a buffer larger than the last-level cache, split over the current threads.
#pragma once

#include <cstddef>
#include <vector>

namespace vq {

// Size of the largest CPU cache in bytes (0 if unknown).
size_t last_level_cache_bytes();

// Reads `bytes` bytes `reps` times (after one warm-up pass that also faults the pages in) and
// returns the GB/s (1e9 bytes) of each timed pass.
std::vector<double> measure_read_bandwidth(size_t bytes, int reps);

}  // namespace vq
