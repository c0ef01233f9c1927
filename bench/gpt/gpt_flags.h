// The GPT shape flags the GPT benchmarks share: --preset ref|gpt2 (the
// tutorial's reference model or GPT-2 124M), then any of --n-layer,
// --n-head, --n-embd, --block-size, --vocab over it. Header-only, as
// bench_args.h.
#pragma once

#include <string>

#include "bench/bench_args.h"
#include "cohort/nn/models/gpt.h"

namespace cohort::bench {

// Reads the current flag of args into config when it is one of these; false otherwise.
inline bool read_gpt_shape(Args& args, nn::GPTConfig& config) {
  if (args.is("--preset")) {
    const std::string v = args.value();
    if (v == "ref") {
      config = nn::GPTConfig::reference();
    } else if (v == "gpt2") {
      config = nn::GPTConfig::gpt2();
    } else {
      args.fail("--preset " + v + ": expected ref or gpt2");
    }
  } else if (args.is("--n-layer")) {
    config.n_layer = args.integer();
  } else if (args.is("--n-head")) {
    config.n_head = args.integer();
  } else if (args.is("--n-embd")) {
    config.n_embd = args.integer();
  } else if (args.is("--block-size")) {
    config.block_size = args.integer();
  } else if (args.is("--vocab")) {
    config.vocab_size = args.integer();
  } else {
    return false;
  }
  return true;
}

}  // namespace cohort::bench
