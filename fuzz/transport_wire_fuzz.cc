// What ranks read from each other before trusting anything: the published
// address line (cohort/transport/peer_address.h), the hello that opens a
// connection, and the collectives' wire header as described in mismatch
// errors (cohort/collectives/wire.h). Arbitrary bytes must be rejected with
// cohort::Error or described without reading out of bounds.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "cohort/base/error.h"
#include "cohort/collectives/wire.h"
#include "cohort/transport/peer_address.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cohort;
  if (size >= sizeof(transport::Hello)) {
    transport::Hello h;
    std::memcpy(&h, data, sizeof(h));
    std::string why;
    (void)transport::hello_valid(h, static_cast<int>(data[0] % 8), 8, 42, &why);
  }
  if (size >= sizeof(collectives::WireHeader)) {
    collectives::WireHeader w;
    std::memcpy(&w, data, sizeof(w));
    (void)collectives::describe(w);
  }
  try {
    const std::string text(reinterpret_cast<const char*>(data), size);
    transport::PeerAddress a = transport::parse_peer_address(text, size > 0 ? data[0] % 4 : 0);
    (void)transport::format_peer_address(a);
  } catch (const Error&) {
  }
  return 0;
}
