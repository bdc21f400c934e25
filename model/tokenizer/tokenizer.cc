#include "model/tokenizer/tokenizer.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "model/tokenizer/byte_level.h"
#include "model/tokenizer/utf8.h"

namespace tandem {
namespace {

// Control tokens that end a turn or a document in common chat vocabularies (the texts of
// llama.cpp's end-of-generation list for the families Tandem tokenizes).
constexpr absl::string_view kStopTexts[] = {
    "<|im_end|>",       // ChatML (Qwen, SmolLM)
    "<|endoftext|>",    // GPT-2 style, Qwen, Phi-3
    "<|eot_id|>",       // Llama 3: end of turn
    "<|eom_id|>",       // Llama 3.1: end of message (tool call)
    "<|end_of_text|>",  // Llama 3
    "<|end|>",          // Phi-3
    "<end_of_turn>",    // Gemma
    "</s>",             // SentencePiece vocabularies
    "<EOT>",            // CodeLlama infill
};

// Bytes of a SentencePiece-style byte token "<0xHH>", or the text itself.
std::string ByteTokenBytes(const std::string& text) {
  absl::string_view hex(text);
  int value = 0;
  if (absl::ConsumePrefix(&hex, "<0x") && absl::ConsumeSuffix(&hex, ">") && hex.size() == 2 &&
      absl::SimpleHexAtoi(hex, &value)) {
    return std::string(1, static_cast<char>(value));
  }
  return text;
}

// A normal SentencePiece token's text with "▁" (U+2581) back to spaces.
std::string UnescapeSpaces(absl::string_view text) {
  return absl::StrReplaceAll(text, {{"\xE2\x96\x81", " "}});
}

// The whitespace llama.cpp's RSTRIP removes (C isspace).
bool IsAsciiSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Create(TokenizerSpec spec) {
  const size_t n = spec.tokens.size();
  if (n == 0) return absl::InvalidArgumentError("tokenizer vocabulary is empty");
  if (n > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError("tokenizer vocabulary exceeds int32 ids");
  }
  if (spec.kinds.empty()) spec.kinds.assign(n, TokenKind::kNormal);
  if (spec.kinds.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer has ", n, " tokens but ", spec.kinds.size(), " token types"));
  }
  for (const auto& [name, id] :
       {std::pair{"bos", spec.bos_id}, std::pair{"eos", spec.eos_id},
        std::pair{"padding", spec.pad_id}, std::pair{"unknown", spec.unk_id}}) {
    if (id < -1 || id >= static_cast<int64_t>(n)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer ", name, " id ", id, " is outside the vocabulary [0, ", n, ")"));
    }
  }
  for (const int32_t id : spec.stop_ids) {
    if (id < 0 || id >= static_cast<int64_t>(n)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer stop id ", id, " is outside the vocabulary [0, ", n, ")"));
    }
  }
  const bool spm = spec.model == TokenizerModel::kSentencePiece;
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  t->rstrip_.assign(n, false);
  for (const int32_t id : spec.rstrip_ids) {
    if (id < 0 || id >= static_cast<int64_t>(n)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer rstrip id ", id, " is outside the vocabulary [0, ", n, ")"));
    }
    t->rstrip_[id] = true;
  }
  absl::flat_hash_map<std::string, int32_t> vocab;  // BPE: byte-level text -> first id
  if (!spm) vocab.reserve(n);
  t->bytes_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const int32_t id = static_cast<int32_t>(i);
    const std::string& text = spec.tokens[i];
    if (!spm) vocab.try_emplace(text, id);
    switch (spec.kinds[i]) {
      case TokenKind::kControl:
      case TokenKind::kUserDefined:
      case TokenKind::kUnknown:
        t->bytes_[i] = text;
        if (t->special_ids_.try_emplace(text, id).second && !text.empty()) {
          t->specials_.emplace_back(text, id);
          t->special_first_byte_[static_cast<uint8_t>(text[0])] = true;
        }
        break;
      case TokenKind::kByte:
        t->bytes_[i] = ByteTokenBytes(text);
        break;
      default:
        if (spm) {
          t->bytes_[i] = UnescapeSpaces(text);
        } else if (!ByteLevelToBytes(text, &t->bytes_[i])) {
          // A token outside the byte-level alphabet (rare; e.g. a padding entry) is its text.
          t->bytes_[i] = text;
        }
    }
  }
  std::stable_sort(t->specials_.begin(), t->specials_.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  if (spm) {
    if (spec.scores.empty()) spec.scores.assign(n, 0.0f);
    TANDEM_ASSIGN_OR_RETURN(SpmMerger merger,
                            SpmMerger::Create(spec.tokens, spec.scores, spec.unk_id));
    t->spm_.emplace(std::move(merger));
  } else {
    TANDEM_ASSIGN_OR_RETURN(BpeMerger bpe,
                            BpeMerger::Create(vocab, spec.merges, spec.ignore_merges));
    t->bpe_.emplace(std::move(bpe));
  }
  t->model_ = spec.model;
  t->add_space_prefix_ = spm && spec.add_space_prefix;
  t->space_prefix_ = spec.space_prefix;
  t->tokens_ = std::move(spec.tokens);
  t->kinds_ = std::move(spec.kinds);
  t->pre_ = spec.pre;
  t->bos_id_ = spec.bos_id;
  t->eos_id_ = spec.eos_id;
  t->spec_add_bos_ = spec.add_bos && spec.bos_id >= 0;
  t->spec_add_eos_ = spec.add_eos && spec.eos_id >= 0;
  if (spec.eos_id >= 0) t->stop_ids_.push_back(spec.eos_id);
  for (const absl::string_view stop : kStopTexts) {
    const auto it = t->special_ids_.find(stop);
    if (it != t->special_ids_.end() && t->kinds_[it->second] == TokenKind::kControl &&
        !t->IsStop(it->second)) {
      t->stop_ids_.push_back(it->second);
    }
  }
  for (const int32_t id : spec.stop_ids) {
    if (!t->IsStop(id)) t->stop_ids_.push_back(id);
  }
  return t;
}

void Tokenizer::EncodePlain(absl::string_view text, bool at_start,
                            std::vector<int32_t>* out) const {
  if (text.empty()) return;
  if (spm_.has_value()) {
    // Plain spans alternate with special tokens, so every span starts the input or follows a
    // special token: each gets the prefix space (llama.cpp's is_prev_special rule) — or, as
    // HF's Metaspace pre-tokenizer does, only a span not starting with a space, and with
    // prepend_scheme "first" only the one at the start of the text.
    bool prefix = add_space_prefix_;
    if (space_prefix_ != SpacePrefix::kEverySpan &&
        (text[0] == ' ' || absl::StartsWith(text, "\xE2\x96\x81"))) {
      prefix = false;
    }
    if (space_prefix_ == SpacePrefix::kFirstSpanUnlessSpace && !at_start) prefix = false;
    std::string escaped = prefix ? "\xE2\x96\x81" : "";
    escaped.append(absl::StrReplaceAll(text, {{" ", "\xE2\x96\x81"}}));
    spm_->Encode(escaped, out);
    return;
  }
  for (const absl::string_view piece : PreTokenize(pre_, text)) bpe_->Encode(piece, out);
}

std::vector<int32_t> Tokenizer::Encode(absl::string_view text, bool parse_special,
                                       bool with_bos) const {
  std::vector<int32_t> out;
  if (spec_add_bos_ && with_bos) out.push_back(bos_id_);
  size_t plain_begin = 0;
  for (size_t p = 0; p < text.size();) {
    if (!special_first_byte_[static_cast<uint8_t>(text[p])]) {
      ++p;
      continue;
    }
    const std::pair<std::string, int32_t>* match = nullptr;
    for (const auto& special : specials_) {
      if (!parse_special && kinds_[special.second] != TokenKind::kUserDefined) continue;
      if (absl::StartsWith(text.substr(p), special.first)) {
        match = &special;
        break;
      }
    }
    if (match == nullptr) {
      ++p;
      continue;
    }
    EncodePlain(text.substr(plain_begin, p - plain_begin), plain_begin == 0, &out);
    out.push_back(match->second);
    p += match->first.size();
    if (rstrip_[match->second]) {
      while (p < text.size() && IsAsciiSpace(text[p])) ++p;
    }
    plain_begin = p;
  }
  EncodePlain(text.substr(plain_begin), plain_begin == 0, &out);
  if (spec_add_eos_ && with_bos) out.push_back(eos_id_);
  return out;
}

std::string Tokenizer::Decode(absl::Span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= vocab_size()) {
      // Keep ill-formed input visible without letting it merge with neighbouring bytes.
      bytes.append(kReplacementUtf8);
      continue;
    }
    if (skip_special && IsSkippable(id)) continue;
    absl::string_view piece = bytes_[id];
    if (i == 0 && StripsFirstSpace(id, skip_special)) absl::ConsumePrefix(&piece, " ");
    bytes.append(piece.data(), piece.size());
  }
  return SanitizeUtf8(bytes);
}

bool Tokenizer::IsSkippable(int32_t id) const {
  const TokenKind k = Kind(id);
  return k == TokenKind::kControl || k == TokenKind::kUnknown;
}

bool Tokenizer::StripsFirstSpace(int32_t first_id, bool skip_special) const {
  // llama.cpp's detokenizer drops the space add_space_prefix put in front of the text, except
  // when it removes a leading BOS (then the text after it keeps its space).
  return add_space_prefix_ && !(skip_special && spec_add_bos_ && first_id == bos_id_);
}

absl::string_view Tokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return bytes_[id];
}

absl::StatusOr<absl::string_view> Tokenizer::TokenText(int32_t id) const {
  if (id < 0 || id >= vocab_size()) {
    return absl::NotFoundError(
        absl::StrCat("token id ", id, " is outside the vocabulary [0, ", vocab_size(), ")"));
  }
  return absl::string_view(tokens_[id]);
}

TokenKind Tokenizer::Kind(int32_t id) const {
  return id >= 0 && id < vocab_size() ? kinds_[id] : TokenKind::kUnknown;
}

bool Tokenizer::IsSpecial(int32_t id) const {
  const TokenKind k = Kind(id);
  return k == TokenKind::kControl || k == TokenKind::kUserDefined;
}

absl::StatusOr<int32_t> Tokenizer::SpecialTokenId(absl::string_view text) const {
  const auto it = special_ids_.find(text);
  if (it == special_ids_.end()) {
    return absl::NotFoundError(absl::StrCat("no special token '", text, "' in the vocabulary"));
  }
  return it->second;
}

std::optional<int32_t> Tokenizer::bos_id() const {
  return bos_id_ >= 0 ? std::optional<int32_t>(bos_id_) : std::nullopt;
}

std::optional<int32_t> Tokenizer::eos_id() const {
  return eos_id_ >= 0 ? std::optional<int32_t>(eos_id_) : std::nullopt;
}

bool Tokenizer::IsStop(int32_t id) const {
  return std::find(stop_ids_.begin(), stop_ids_.end(), id) != stop_ids_.end();
}

absl::Status Tokenizer::ValidateIds(absl::Span<const int32_t> ids) const {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size()) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", ids[i], " at position ", i,
                                                     " is outside the vocabulary [0, ",
                                                     vocab_size(), ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace tandem
