// The job token: a random secret shared by every process of one job, which
// the TcpStore server demands from each client before it may read or write
// keys. The launcher creates one per job and passes it in COHORT_TOKEN.
#pragma once

#include <optional>
#include <string>

namespace cohort::rendezvous {

inline constexpr const char* kTokenEnv = "COHORT_TOKEN";

// 32 hex characters from the kernel's random source (getrandom).
std::string generate_token();

// The explicit token when given, else COHORT_TOKEN, else "" (an open store).
std::string resolve_token(const std::optional<std::string>& explicit_token);

// Compares without an early exit, so response time does not leak a prefix.
bool tokens_equal(const std::string& a, const std::string& b);

}  // namespace cohort::rendezvous
