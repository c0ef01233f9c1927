// The pipeline form of a GPT (nn/models/gpt.h): the plain model's children
// in a row, so that a Pipeline (pipeline.h) can cut it into stages:
//
//   embed    idx int64 [B, T] -> wte(idx) + wpe(0..T-1)   [B, T, C]
//   h0..hL-1 the model's Blocks                             [B, T, C]
//   ln_f     the final LayerNorm                            [B, T, C]
//   head     the model's lm_head (weight = wte.weight)      [B, T, V] logits
//
// The layers share the plain model's modules (no copies), and the returned
// layer names give them the plain model's keys ("transformer.wte.weight",
// "transformer.h.0.attn.c_attn.weight", ..., "lm_head.weight"), so the
// pipeline's state dicts and checkpoints interchange with the plain model's.
// The tied embedding/head weight is one tensor on a rank holding both ends;
// on separate ranks each holds a copy and the Pipeline sums their gradients
// (PipelineOptions::tied_parameters, filled here).
//
//   auto gpt = std::make_shared<nn::GPT>(config, gen);   // every rank, same seed
//   Pipeline pipe = ...;  // make_gpt_pipeline(gpt, grid, {.micro_batches = 4})
//   double loss = pipe->step(idx, targets, gpt_loss_fn);
//
// Thread safety: as the model's (module.h). Failure: InvalidArgument from
// the Pipeline (more stages than the model's L + 3 layers, ...).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cohort/nn/models/gpt.h"
#include "cohort/nn/sequential.h"
#include "cohort/parallel/pipeline/pipeline.h"

namespace cohort::parallel::pipeline {

struct GPTPipelineModel {
  std::shared_ptr<nn::Sequential> layers;                 // embed, h0 .., ln_f, head
  std::vector<std::string> layer_names;                   // their plain-model names
  std::vector<std::vector<std::string>> tied_parameters;  // {wte.weight, lm_head.weight}
};

// The layers of `gpt` (shared, not copied); gpt must outlive nothing: the
// layers keep its modules alive.
GPTPipelineModel make_gpt_pipeline_model(const nn::GPT& gpt);

// A Pipeline over gpt's layers: options' layer_names and tied_parameters are
// set from make_gpt_pipeline_model (any given are replaced). Collective over
// grid.world, as the Pipeline constructor.
std::unique_ptr<Pipeline> make_gpt_pipeline(const nn::GPT& gpt, PipelineGrid grid,
                                            PipelineOptions options = {});

// The GPT's training loss for Pipeline::step: logits [b, T, V] against
// targets int64 [b, T] (-1: ignored), mean cross-entropy over the tokens.
Tensor gpt_loss_fn(const Tensor& logits, const Tensor& targets);

}  // namespace cohort::parallel::pipeline
