// Helpers shared by the Store implementations: the decimal encoding of
// counters (as PyTorch stores them, so `get` after `add` reads "3") and the
// TimeoutError message naming the missing keys.
#pragma once

#include <string>
#include <vector>

#include "cohort/rendezvous/store.h"

namespace cohort::rendezvous::detail {

// Parses a counter value; throws InvalidArgument naming the key when the
// stored bytes are not a decimal integer.
int64_t parse_counter(const std::string& key, const Bytes& value);
Bytes format_counter(int64_t value);

// "<op>: timed out after <ms> ms waiting for keys [a, b] (<where>)"
std::string timeout_message(const std::string& op, Duration timeout,
                            const std::vector<std::string>& missing, const std::string& where);

}  // namespace cohort::rendezvous::detail
