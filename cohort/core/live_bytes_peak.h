// The peak of Storage::live_bytes() (storage.h): the most host bytes that
// live Storages have held since the last reset, e.g. a training step's peak
// with and without activation checkpointing (bench/gpt). Kept apart from
// storage.h so that code which does not ask for it does not depend on it.
// Process-wide statistics, like live_bytes(); thread-safe (atomics). Device
// bytes are their allocator's (DeviceRuntime::memory_stats), not counted.
#pragma once

#include <cstddef>

namespace cohort {

size_t peak_live_bytes();
// Sets the peak to the bytes live now.
void reset_peak_live_bytes();

}  // namespace cohort
