// Text generation with a GPT (gpt.h): the autoregressive loop over the
// model's KV-cached forward, sampling each new token greedily, with a
// temperature or among the top k, from an explicit Generator, so that a seed
// gives the same text every time. Kept apart from the model, which only
// computes logits.
//
// Failure: InvalidArgument naming the bad argument (prompt shape or dtype,
// negative max_new_tokens, temperature or top_k) or, from the model, token ids
// out of range. Thread safety: generate only reads the model (its forward is
// stateless, see gpt.h) and keeps its KV cache to itself, so several threads
// may generate with one model, each with its own Generator.
#pragma once

#include <cstdint>
#include <functional>

#include "cohort/core/random.h"
#include "cohort/nn/models/gpt.h"

namespace cohort::nn {

// Sampling options for generate().
struct GenerateOptions {
  // Logits are divided by it; 0 picks the most likely token (greedy).
  double temperature = 1.0;
  // Sample only among the top_k most likely tokens; 0 means all.
  int64_t top_k = 0;
  // Called after each new token with its ids [B] (int64), e.g. to stream text.
  std::function<void(const Tensor&)> on_token = nullptr;
};

// Appends max_new_tokens tokens to prompt int64 [B, T0] (T0 >= 1) and returns
// [B, T0 + max_new_tokens], sampling each from the model's distribution at
// the last position (see GenerateOptions), drawing from gen (one uniform per
// sequence per token). Runs without autograd, with a KV cache; the model
// should be in eval mode. A context longer than block_size is cropped to its
// last block_size tokens, as nanoGPT's generate does.
Tensor generate(GPT& model, const Tensor& prompt, int64_t max_new_tokens,
                const GenerateOptions& options, Generator& gen);

}  // namespace cohort::nn
