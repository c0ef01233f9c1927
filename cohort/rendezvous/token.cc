#include "cohort/rendezvous/token.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>

#include "cohort/base/error.h"

namespace cohort::rendezvous {

std::string generate_token() {
  uint8_t raw[16];
  size_t got = 0;
  while (got < sizeof(raw)) {
    ssize_t r = ::getrandom(raw + got, sizeof(raw) - got, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw_errno("generate_token: getrandom", errno);
    }
    got += static_cast<size_t>(r);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (uint8_t b : raw) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

std::string resolve_token(const std::optional<std::string>& explicit_token) {
  if (explicit_token) return *explicit_token;
  const char* env = std::getenv(kTokenEnv);
  return env ? std::string(env) : std::string();
}

bool tokens_equal(const std::string& a, const std::string& b) {
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  size_t n = a.size() < b.size() ? a.size() : b.size();
  for (size_t i = 0; i < n; ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace cohort::rendezvous
