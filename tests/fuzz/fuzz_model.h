// The model the request fuzzers validate against: a GGUF image holding only the synthetic
// byte-level BPE vocabulary (model/tools/synthetic_vocab.h: ChatML specials, 256 byte tokens,
// merges) and llama metadata, with a ChatML template that carries a default system message.
// Built in memory once per process; never written to disk.
#pragma once

#include <cstdint>
#include <string>

#include "router/served_model.h"

namespace tandem::fuzz {

inline constexpr int kFuzzVocab = 320;
inline constexpr int64_t kFuzzContext = 256;
inline constexpr char kFuzzModelName[] = "fuzz-model";

// The GGUF image (metadata only: tokenizer.ggml.*, llama.context_length, general.name).
std::string TokenizerGgufImage();

// The ServedModel of TokenizerGgufImage(); aborts if it cannot be built (a broken build, not a
// finding).
const ServedModel& FuzzServedModel();

}  // namespace tandem::fuzz
