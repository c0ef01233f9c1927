// Grad mode: a thread-local switch (the one piece of per-thread global state
// docs/design.md allows). While disabled, ops record no graph -- used for
// inference, optimizer steps and inside backward itself. Each thread starts
// enabled.
#pragma once

namespace cohort {

class GradMode {
 public:
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

// RAII: disables grad recording for a scope (torch.no_grad()).
class NoGradGuard {
 public:
  NoGradGuard() : prev_(GradMode::is_enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// RAII: enables grad recording for a scope (torch.enable_grad()).
class EnableGradGuard {
 public:
  EnableGradGuard() : prev_(GradMode::is_enabled()) { GradMode::set_enabled(true); }
  ~EnableGradGuard() { GradMode::set_enabled(prev_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace cohort
