// The parameter server's RPC protocol, shared by ParameterServerService (the
// server's handlers) and ParameterServerClient (the trainer's calls). Not a
// public API: the names and layouts may change with both ends.
//
//   ps.pull    u32 worker, i64 clock             -> i64 version, tensors
//   ps.push    u32 worker, i64 clock, tensors    -> (empty)
//   ps.finish  u32 worker                        -> (empty)
//   ps.state   (empty)                           -> dict of the shard's weights
//   ps.load    dict                              -> (empty)
//   ps.optim   (empty)                           -> dict of the shard optimizer's state
//   ps.stats   (empty)                           -> ParameterServerStats
//   ps.alive   (empty)                           -> (empty); registered on trainers,
//                                                   the servers' liveness probe
// Tensors and dicts as tensor_message.h writes them.
#pragma once

#include "cohort/parallel/parameter_server/parameter_server.h"
#include "cohort/parallel/parameter_server/wire_format.h"

namespace cohort::parallel::ps_protocol {

inline constexpr const char* kPull = "ps.pull";
inline constexpr const char* kPush = "ps.push";
inline constexpr const char* kFinish = "ps.finish";
inline constexpr const char* kState = "ps.state";
inline constexpr const char* kLoad = "ps.load";
inline constexpr const char* kOptim = "ps.optim";
inline constexpr const char* kLoadOptim = "ps.load_optim";
inline constexpr const char* kStats = "ps.stats";
inline constexpr const char* kAlive = "ps.alive";

void write_stats(WireWriter& w, const ParameterServerStats& s);
ParameterServerStats read_stats(WireReader& r);

}  // namespace cohort::parallel::ps_protocol
