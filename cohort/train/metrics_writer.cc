#include "cohort/train/metrics_writer.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <memory>

#include "cohort/base/error.h"

namespace cohort::train {
namespace {

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

std::unique_ptr<std::FILE, FileCloser> open_append(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (f == nullptr) throw_errno("metrics file " + path + ": cannot open for appending", errno);
  return std::unique_ptr<std::FILE, FileCloser>(f);
}

}  // namespace

void MetricsWriter::check_writable() const { open_append(path_); }

void MetricsWriter::append(const nlohmann::json& record) const {
  std::string line = record.dump() + "\n";
  auto f = open_append(path_);
  if (std::fwrite(line.data(), 1, line.size(), f.get()) != line.size() ||
      std::fflush(f.get()) != 0) {
    throw_errno("metrics file " + path_ + ": write failed", errno);
  }
}

nlohmann::json json_number(double value) {
  return std::isfinite(value) ? nlohmann::json(value) : nlohmann::json(nullptr);
}

}  // namespace cohort::train
