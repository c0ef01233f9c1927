#include "cohort/rendezvous/env_bootstrap.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "cohort/base/error.h"
#include "cohort/base/log.h"
#include "cohort/base/runtime.h"
#include "cohort/rendezvous/file_store.h"
#include "cohort/rendezvous/prefix_store.h"
#include "cohort/rendezvous/slurm.h"
#include "cohort/rendezvous/tcp_store.h"

namespace cohort::rendezvous {
namespace {

std::optional<int64_t> parse_int(std::string_view s) {
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// Reads the first of names that is set; throws naming it when malformed.
std::optional<int> env_int(std::initializer_list<const char*> names, const char** found = nullptr) {
  for (const char* name : names) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') continue;
    auto n = parse_int(v);
    COHORT_CHECK(n && *n >= 0 && *n <= INT32_MAX,
                 "bootstrap: {}='{}' is not a non-negative integer", name, v);
    if (found) *found = name;
    return static_cast<int>(*n);
  }
  return std::nullopt;
}

uint16_t parse_port(const std::string& text, const std::string& what) {
  auto n = parse_int(text);
  COHORT_CHECK(n && *n > 0 && *n <= 65535, "bootstrap: {}='{}' is not a port in 1..65535", what,
               text);
  return static_cast<uint16_t>(*n);
}

const char* env_str(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

// COHORT_SHM_RING_BYTES and COHORT_SHM_SINGLE_COPY into the network options.
void read_shm_settings(transport::NetworkOptions& n) {
  if (std::optional<int> b = env_int({"COHORT_SHM_RING_BYTES"})) {
    COHORT_CHECK(*b >= 4096 && (*b & (*b - 1)) == 0,
                 "bootstrap: COHORT_SHM_RING_BYTES='{}' is not a power of two >= 4096", *b);
    n.shm_ring_bytes = static_cast<size_t>(*b);
  }
  if (const char* v = env_str("COHORT_SHM_SINGLE_COPY")) {
    const std::string_view t(v);
    COHORT_CHECK(t == "0" || t == "1",
                 "bootstrap: COHORT_SHM_SINGLE_COPY='{}': expected 0 (off) or 1 (on)", v);
    n.shm_single_copy = t == "1";
  }
}

// Slurm's SLURM_PROCID/NTASKS/LOCALID describe this process only inside a
// job step (srun sets SLURM_STEP_ID); a batch script sees them too, with
// SLURM_NTASKS meant for the steps it starts.
bool in_slurm_step() { return env_str("SLURM_STEP_ID") != nullptr; }

// The first of own, ompi (and slurm, inside a Slurm job step) that is set.
std::optional<int> from_env(const char* own, const char* ompi, const char* slurm) {
  return in_slurm_step() ? env_int({own, ompi, slurm}) : env_int({own, ompi});
}

// The first Slurm variable of names that is set, and its value.
std::optional<std::pair<const char*, std::string>> slurm_var(
    std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (const char* v = env_str(name)) return std::make_pair(name, std::string(v));
  }
  return std::nullopt;
}

// MASTER_ADDR, else the first host of the step's (or the job's) node list,
// where srun starts task 0. Sets from_slurm when the list gave it.
std::string master_addr(int rank, std::string* from_slurm) {
  if (const char* addr = env_str("MASTER_ADDR")) return addr;
  auto list = slurm_var({"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"});
  COHORT_CHECK(list.has_value(),
               "bootstrap env:// (rank {}): MASTER_ADDR is not set (the host of rank 0 or of the "
               "launcher's store), nor SLURM_STEP_NODELIST or SLURM_JOB_NODELIST; `cohort run`, "
               "torchrun and srun set them, under mpirun export it",
               rank);
  try {
    std::string host = slurm::first_host(list->second);
    *from_slurm = fmt::format("the first node of {}='{}'", list->first, list->second);
    return host;
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(fmt::format(
        "bootstrap env:// (rank {}): MASTER_ADDR is unset and {} cannot be read: {}; export "
        "MASTER_ADDR",
        rank, list->first, e.what()));
  }
}

// MASTER_PORT, else the port derived from SLURM_JOB_ID (slurm::port_for_job).
uint16_t master_port(int rank) {
  if (const char* port = env_str("MASTER_PORT")) return parse_port(port, "MASTER_PORT");
  const char* job = env_str("SLURM_JOB_ID");
  COHORT_CHECK(job != nullptr,
               "bootstrap env:// (rank {}): MASTER_PORT is not set (the store's port), nor "
               "SLURM_JOB_ID; `cohort run`, torchrun and srun set them, under mpirun export it",
               rank);
  auto id = parse_int(job);
  COHORT_CHECK(id && *id >= 0,
               "bootstrap env:// (rank {}): MASTER_PORT is unset and SLURM_JOB_ID='{}' is not a "
               "job id; export MASTER_PORT",
               rank, job);
  return slurm::port_for_job(*id);
}

// Slurm's count of this step's tasks on this node, when it describes one.
std::optional<int> slurm_local_world_size(int rank) {
  auto per_node = slurm_var({"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"});
  std::optional<int> node = env_int({"SLURM_NODEID"});
  if (!per_node || !node) return std::nullopt;
  try {
    return slurm::tasks_on_node(per_node->second, *node);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(
        fmt::format("bootstrap: {} with SLURM_NODEID={}: {}", per_node->first, *node, e.what()));
  }
}

}  // namespace

std::optional<int> slurm_task_cpus() {
  if (!in_slurm_step()) return std::nullopt;
  if (std::optional<int> per_task = env_int({"SLURM_CPUS_PER_TASK"}); per_task && *per_task > 0) {
    return per_task;
  }
  std::optional<int> on_node = env_int({"SLURM_CPUS_ON_NODE"});
  std::optional<int> tasks = slurm_local_world_size(0);
  if (!on_node || *on_node == 0 || !tasks) return std::nullopt;
  return std::max(1, *on_node / std::max(1, *tasks));
}

std::optional<int> env_world_size() {
  return from_env("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS");
}

bool env_mpirun_without_master() {
  return env_str("OMPI_COMM_WORLD_SIZE") != nullptr && env_str("MASTER_ADDR") == nullptr;
}

namespace {
std::atomic<bool> g_env_settings_applied{false};
}  // namespace

EnvSettings read_env_settings() {
  EnvSettings s;
  if (const char* v = env_str("COHORT_LOG_LEVEL")) {
    const std::string_view t(v);
    s.log_level = t == "error"                    ? LogLevel::kError
                  : t == "warn" || t == "warning" ? LogLevel::kWarn
                  : t == "info"                   ? LogLevel::kInfo
                  : t == "debug"                  ? LogLevel::kDebug
                                                  : std::optional<LogLevel>();
    COHORT_CHECK(s.log_level.has_value(),
                 "COHORT_LOG_LEVEL='{}': expected one of error, warn, info, debug", v);
  }
  if (const char* v = env_str("COHORT_NUM_THREADS")) {
    auto n = parse_int(v);
    COHORT_CHECK(n && *n > 0 && *n <= INT32_MAX,
                 "COHORT_NUM_THREADS='{}' is not a positive number of threads", v);
    s.num_threads = static_cast<int>(*n);
  }
  if (const char* v = env_str("COHORT_STORAGE_CACHE")) {
    const std::string_view t(v);
    COHORT_CHECK(t == "0" || t == "1", "COHORT_STORAGE_CACHE='{}': expected 0 (off) or 1 (on)", v);
    s.storage_cache = t == "1";
  }
  if (const char* v = env_str("COHORT_CUDNN_ATTENTION")) {
    const std::string_view t(v);
    COHORT_CHECK(t == "0" || t == "1",
                 "COHORT_CUDNN_ATTENTION='{}': expected 0 (cohort's own attention kernel) or 1 "
                 "(cuDNN's fused attention where it takes the shape)",
                 v);
    s.cudnn_attention = t == "1";
  }
  if (const char* v = env_str("COHORT_DEVICE_TIMEOUT_S")) {
    char* end = nullptr;
    const double t = std::strtod(v, &end);
    COHORT_CHECK(end != v && *end == '\0' && std::isfinite(t) && t > 0,
                 "COHORT_DEVICE_TIMEOUT_S='{}' is not a positive number of seconds", v);
    s.device_timeout_s = t;
  }
  return s;
}

void apply_env_settings(const EnvSettings& settings) {
  g_env_settings_applied.store(true);
  if (settings.log_level) set_log_level(*settings.log_level);
  if (!settings.num_threads && !settings.storage_cache && !settings.device_timeout_s &&
      !settings.cudnn_attention)
    return;
  Runtime& rt = Runtime::process();
  RuntimeOptions o = rt.options();
  if (settings.num_threads) o.num_threads = *settings.num_threads;
  if (settings.storage_cache)
    o.storage_cache_bytes = *settings.storage_cache ? RuntimeOptions{}.storage_cache_bytes : 0;
  if (settings.device_timeout_s) o.device_wait_timeout_s = *settings.device_timeout_s;
  if (settings.cudnn_attention) o.cudnn_attention = *settings.cudnn_attention;
  rt.configure(o);
}

InitMethod parse_init_method(const std::string& url) {
  InitMethod m;
  auto sep = url.find("://");
  COHORT_CHECK(sep != std::string::npos,
               "bootstrap: init method '{}' must look like env://, tcp://host:port or "
               "file:///path",
               url);
  m.scheme = url.substr(0, sep);
  std::string rest = url.substr(sep + 3);
  std::string query;
  if (auto q = rest.find('?'); q != std::string::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  size_t pos = 0;
  while (pos < query.size()) {
    size_t amp = query.find('&', pos);
    std::string item = query.substr(pos, amp == std::string::npos ? std::string::npos : amp - pos);
    pos = amp == std::string::npos ? query.size() : amp + 1;
    auto eq = item.find('=');
    std::string key = item.substr(0, eq);
    std::string value = eq == std::string::npos ? "" : item.substr(eq + 1);
    auto n = parse_int(value);
    if (key == "rank" || key == "world_size") {
      COHORT_CHECK(n && *n >= 0 && *n <= INT32_MAX,
                   "bootstrap: init method '{}': {}='{}' is not a non-negative integer", url, key,
                   value);
      (key == "rank" ? m.rank : m.world_size) = static_cast<int>(*n);
    } else {
      throw InvalidArgument(fmt::format(
          "bootstrap: init method '{}': unknown parameter '{}' (known: rank, world_size)", url,
          key));
    }
  }
  if (m.scheme == "env") {
    COHORT_CHECK(rest.empty(), "bootstrap: env:// takes no address, got '{}'", url);
  } else if (m.scheme == "tcp") {
    size_t colon;
    if (!rest.empty() && rest[0] == '[') {  // [v6 address]:port
      auto close = rest.find(']');
      COHORT_CHECK(close != std::string::npos, "bootstrap: '{}': unclosed '['", url);
      m.host = rest.substr(1, close - 1);
      colon = close + 1;
      COHORT_CHECK(colon < rest.size() && rest[colon] == ':', "bootstrap: '{}' needs :port", url);
    } else {
      colon = rest.rfind(':');
      COHORT_CHECK(colon != std::string::npos, "bootstrap: '{}' must be tcp://host:port", url);
      m.host = rest.substr(0, colon);
    }
    COHORT_CHECK(!m.host.empty(), "bootstrap: '{}' has no host", url);
    m.port = parse_port(rest.substr(colon + 1), "tcp:// port");
  } else if (m.scheme == "file") {
    COHORT_CHECK(!rest.empty(), "bootstrap: '{}' has no path (file:///path/to/file)", url);
    m.path = rest;
  } else {
    throw InvalidArgument(
        fmt::format("bootstrap: unknown init method scheme '{}' in '{}' (known: env, tcp, file)",
                    m.scheme, url));
  }
  return m;
}

GroupEnvSettings read_group_env_settings(const std::vector<std::string>& knobs) {
  GroupEnvSettings g;
  if (const char* a = env_str("COHORT_ADDR")) g.network.address = a;
  if (const char* i = env_str("COHORT_SOCKET_IFNAME")) g.network.interface = i;
  if (const char* d = env_str("COHORT_FLIGHT_RECORDER_DIR")) g.flight_recorder_dir = d;
  if (std::optional<int> t = env_int({"COHORT_CONNECT_TIMEOUT"})) {
    COHORT_CHECK(*t > 0, "bootstrap: COHORT_CONNECT_TIMEOUT must be a positive number of seconds");
    g.network.connect_timeout = std::chrono::seconds(*t);
  }
  for (const std::string& name : knobs) {
    if (const char* v = env_str(name.c_str())) g.knobs[name] = v;
  }
  read_shm_settings(g.network);
  return g;
}

BootstrapResult bootstrap(const std::string& init_method, const BootstrapOptions& options) {
  InitMethod m = parse_init_method(init_method);
  BootstrapResult r;
  // The edge for programs that did not apply the environment themselves.
  if (!g_env_settings_applied.load()) apply_env_settings(read_env_settings());

  const bool slurm_step = in_slurm_step();
  std::optional<int> rank = options.rank >= 0 ? std::optional<int>(options.rank)
                            : m.rank >= 0
                                ? std::optional<int>(m.rank)
                                : from_env("RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID");
  std::optional<int> world = options.world_size >= 0 ? std::optional<int>(options.world_size)
                             : m.world_size >= 0     ? std::optional<int>(m.world_size)
                                                     : env_world_size();
  COHORT_CHECK(rank.has_value(),
               "bootstrap {}: the rank is not known: RANK is not set (nor OMPI_COMM_WORLD_RANK, "
               "nor SLURM_PROCID in a Slurm job step); run under `cohort run`, torchrun, mpirun "
               "or srun, or pass the rank",
               init_method);
  COHORT_CHECK(world.has_value(),
               "bootstrap {}: the world size is not known: WORLD_SIZE is not set (nor "
               "OMPI_COMM_WORLD_SIZE, nor SLURM_NTASKS in a Slurm job step); run under `cohort "
               "run`, torchrun, mpirun or srun, or pass the world size",
               init_method);
  COHORT_CHECK(*world >= 1 && *rank < *world,
               "bootstrap {}: rank must be in [0, world_size), got rank {} and world_size {}",
               init_method, *rank, *world);
  r.rank = *rank;
  r.world_size = *world;
  // Without a local rank the job is taken to run on one host.
  r.local_rank =
      from_env("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID").value_or(r.rank);
  std::optional<int> local_world = env_int({"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"});
  if (!local_world && slurm_step) local_world = slurm_local_world_size(r.rank);
  r.local_world_size = local_world.value_or(r.world_size);

  std::shared_ptr<Store> store;
  if (m.scheme == "file") {
    store = std::make_shared<FileStore>(m.path, options.timeout);
  } else {
    if (m.scheme == "env") {
      std::string from_slurm;
      m.host = master_addr(r.rank, &from_slurm);
      m.port = master_port(r.rank);
      // Rank 0 serves the store where the others look for it; srun's
      // arbitrary and plane distributions may start task 0 elsewhere.
      const char* node = env_str("SLURMD_NODENAME");
      COHORT_CHECK(from_slurm.empty() || r.rank != 0 || node == nullptr || m.host == node,
                   "bootstrap env://: rank 0 runs on node '{}', but MASTER_ADDR is unset and "
                   "{} is '{}', where the other ranks look for rank 0's store; export "
                   "MASTER_ADDR (the host of rank 0)",
                   node ? node : "", from_slurm, m.host);
    }
    const char* hosted = std::getenv(kStoreHostedEnv);
    bool launcher_hosts = hosted && std::string(hosted) == "1";
    TcpStoreOptions o;
    o.host = m.host;
    o.port = m.port;
    o.is_server = !launcher_hosts && r.rank == 0;
    o.token = options.token;
    o.timeout = options.timeout;
    store = std::make_shared<TcpStore>(o);
  }
  r.master_addr = m.host;
  r.master_port = m.port;
  GroupEnvSettings g = read_group_env_settings(options.knobs);
  r.network = std::move(g.network);
  r.network.master_addr = m.host;
  r.network.master_port = m.port;
  r.flight_recorder_dir = std::move(g.flight_recorder_dir);
  r.knobs = std::move(g.knobs);
  if (const char* restart = std::getenv(kRestartCountEnv); restart && *restart) {
    store = std::make_shared<PrefixStore>(std::string("attempt") + restart, store);
  }
  r.store = std::move(store);
  return r;
}

}  // namespace cohort::rendezvous
