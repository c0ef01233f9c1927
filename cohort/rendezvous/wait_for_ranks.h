// Waiting for the other ranks' keys in a store while saying who is missing:
// every `report_every` a line names this rank, what it waits for and the
// ranks whose keys are not there yet; after `timeout` a TimeoutError says the
// same. What `Store::wait` does, for waits where a person is watching.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "cohort/rendezvous/store.h"

namespace cohort::rendezvous {

// keys[r] is rank r's key. what: e.g. "group 'default': exchanging addresses".
// unit: what the waiters are called in messages ("rank", "node").
void wait_for_ranks(Store& store, const std::vector<std::string>& keys, int rank,
                    const std::string& what, Duration timeout,
                    Duration report_every = std::chrono::seconds(5), const char* unit = "rank");

}  // namespace cohort::rendezvous
