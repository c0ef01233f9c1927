#include "cohort/parallel/parameter_server/ps_protocol.h"

namespace cohort::parallel::ps_protocol {

void write_stats(WireWriter& w, const ParameterServerStats& s) {
  w.i64(s.version);
  w.i64(s.pulls);
  w.i64(s.pushes);
  w.i64(s.pulls_waited);
  w.i64(s.max_clock_gap);
  w.i64(s.active_workers);
  w.u32(static_cast<uint32_t>(s.finished.size()));
  for (int f : s.finished) w.i64(f);
  w.u32(static_cast<uint32_t>(s.lost.size()));
  for (const auto& l : s.lost) {
    w.i64(l.worker);
    w.str(l.name);
    w.str(l.reason);
  }
}

ParameterServerStats read_stats(WireReader& r) {
  ParameterServerStats s;
  s.version = r.i64();
  s.pulls = r.i64();
  s.pushes = r.i64();
  s.pulls_waited = r.i64();
  s.max_clock_gap = r.i64();
  s.active_workers = static_cast<int>(r.i64());
  const uint32_t nf = r.u32();
  for (uint32_t i = 0; i < nf; ++i) s.finished.push_back(static_cast<int>(r.i64()));
  const uint32_t nl = r.u32();
  for (uint32_t i = 0; i < nl; ++i) {
    LostWorker l;
    l.worker = static_cast<int>(r.i64());
    l.name = r.str();
    l.reason = r.str();
    s.lost.push_back(std::move(l));
  }
  return s;
}

}  // namespace cohort::parallel::ps_protocol
