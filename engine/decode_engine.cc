#include "engine/decode_engine.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/request_checks.h"
#include "common/status_macros.h"

namespace tandem {

DecodeEngine::DecodeEngine(Instance* instance, BlockManager* blocks, const DecodeOptions& options)
    : instance_(instance), blocks_(blocks), options_(options) {
  thread_ = std::thread([this] { Loop(); });
}

DecodeEngine::~DecodeEngine() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
  std::vector<std::shared_ptr<Active>> left;
  {
    absl::MutexLock lock(&mu_);
    left.assign(queue_.begin(), queue_.end());
    left.insert(left.end(), running_.begin(), running_.end());
    queue_.clear();
    running_.clear();
  }
  for (auto& a : left) {
    Finish(*a, absl::UnavailableError("decode engine is shutting down"), FinishReason::kError);
  }
}

void DecodeEngine::Finish(Active& a, absl::Status status, FinishReason reason) {
  blocks_->Release(a.request.block_table);
  a.callbacks.on_done(std::move(status), reason, a.generated);
}

absl::StatusOr<GuidedDecoder> DecodeEngine::StartGuided(const DecodeJob& request) const {
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> grammar =
      CompileRequestGrammar(options_.grammars.get(), request.sampling.grammar);
  if (!grammar.ok()) return grammar.status();
  // The generated tokens: the context's last next_step - 1, then first_token.
  std::vector<int32_t> generated(request.context.end() - (request.next_step - 1),
                                 request.context.end());
  const std::vector<int32_t>& stops = request.stop_ids;
  if (std::find(stops.begin(), stops.end(), request.first_token) == stops.end()) {
    generated.push_back(request.first_token);
  }
  return GuidedDecoder::Create(*std::move(grammar), generated, request.stop_ids);
}

absl::Status DecodeEngine::Add(DecodeJob request, DecodeCallbacks callbacks) {
  TANDEM_RETURN_IF_ERROR(CheckTokenBudget(request.max_new_tokens, "max_new_tokens"));
  TANDEM_RETURN_IF_ERROR(ValidateSamplingParams(request.sampling));
  TANDEM_RETURN_IF_ERROR(ValidateSamplingIds(request.sampling, instance_->config().vocab_size));
  TANDEM_RETURN_IF_ERROR(
      CheckTokenId(request.first_token, instance_->config().vocab_size, "first token"));
  const bool penalties = UsesPenalties(request.sampling);
  if (NeedsContext(request.sampling)) {
    if (static_cast<int64_t>(request.context.size()) != request.prompt_len) {
      return absl::InvalidArgumentError(
          absl::StrCat(penalties ? "sampling penalties need" : "a grammar needs",
                       " the context's token ids: got ", request.context.size(),
                       " for a prompt_len of ", request.prompt_len));
    }
    if (request.next_step < 1 || request.next_step - 1 > request.context.size()) {
      return absl::InvalidArgumentError(absl::StrCat("next_step ", request.next_step,
                                                     " does not fit a context of ",
                                                     request.context.size(), " tokens"));
    }
    TANDEM_RETURN_IF_ERROR(
        CheckTokenIds(request.context, instance_->config().vocab_size, "context"));
  }
  const int64_t positions = request.prompt_len + request.max_new_tokens;
  const int64_t needed = VirtualBlocksFor(instance_->options().parallel.dcp_geometry(), positions);
  if (static_cast<int64_t>(request.block_table.size()) < needed) {
    return absl::InvalidArgumentError(absl::StrCat(
        "block table has ", request.block_table.size(), " blocks but prompt (", request.prompt_len,
        ") + max_new_tokens (", request.max_new_tokens, ") needs ", needed));
  }
  std::optional<GuidedDecoder> guided;
  if (!request.sampling.grammar.empty()) {
    TANDEM_ASSIGN_OR_RETURN(guided, StartGuided(request));
  }
  auto a = std::make_shared<Active>();
  a->guided = std::move(guided);
  a->request = std::move(request);
  a->callbacks = std::move(callbacks);
  a->last_token = a->request.first_token;
  if (penalties) {
    a->history = TokenHistory(a->request.context, static_cast<int64_t>(a->request.next_step) - 1);
    a->history.AddOutput(a->request.first_token);
  }
  a->request.context = {};  // the history holds what sampling needs
  const std::vector<int32_t>& stops = a->request.stop_ids;
  // A grammar with nothing left to match ends the request as a stop token would.
  const bool stop = std::find(stops.begin(), stops.end(), a->last_token) != stops.end() ||
                    (a->guided.has_value() && a->guided->IsTerminated());
  if (stop || a->request.max_new_tokens <= 1) {
    Finish(*a, absl::OkStatus(), stop ? FinishReason::kStop : FinishReason::kLength);
    return absl::OkStatus();
  }
  absl::MutexLock lock(&mu_);
  if (stopping_) {
    Finish(*a, absl::UnavailableError("decode engine is shutting down"), FinishReason::kError);
    return absl::OkStatus();
  }
  queue_.push_back(std::move(a));
  return absl::OkStatus();
}

bool DecodeEngine::Cancel(const std::string& id) {
  absl::MutexLock lock(&mu_);
  // Every request of that id: the n choices of one Decode call share it.
  bool marked = false;
  auto mark = [&](auto& list) {
    for (auto& a : list) {
      if (a->request.id == id && !a->cancelled) a->cancelled = marked = true;
    }
  };
  mark(queue_);
  mark(running_);
  return marked;
}

int32_t DecodeEngine::running() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int32_t>(running_.size());
}

int32_t DecodeEngine::queued() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int32_t>(queue_.size());
}

void DecodeEngine::Loop() {
  const int64_t vocab = instance_->config().vocab_size;
  while (true) {
    std::vector<std::shared_ptr<Active>> ended;
    std::vector<std::shared_ptr<Active>> batch;
    StepInput step;
    {
      absl::MutexLock lock(&mu_);
      auto has_work = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !queue_.empty() || !running_.empty();
      };
      mu_.Await(absl::Condition(&has_work));
      if (stopping_) return;
      while (!queue_.empty() && static_cast<int32_t>(running_.size()) < options_.max_batch) {
        running_.push_back(queue_.front());
        queue_.pop_front();
      }
      for (auto it = queue_.begin(); it != queue_.end();) {
        if ((*it)->cancelled) {
          ended.push_back(*it);
          it = queue_.erase(it);
        } else {
          ++it;
        }
      }
      for (auto it = running_.begin(); it != running_.end();) {
        if ((*it)->cancelled) {
          ended.push_back(*it);
          it = running_.erase(it);
        } else {
          ++it;
        }
      }
      for (auto& a : running_) {
        StepRequest sr;
        sr.start_position = a->request.prompt_len + a->generated - 1;
        sr.tokens = {a->last_token};
        sr.block_table = a->request.block_table;
        sr.want_logits = true;
        step.requests.push_back(std::move(sr));
        batch.push_back(a);
      }
    }
    for (auto& a : ended)
      Finish(*a, absl::CancelledError("decode cancelled"), FinishReason::kCancelled);
    if (batch.empty()) continue;

    absl::StatusOr<std::vector<float>> logits = instance_->Run(step);
    absl::flat_hash_map<const Active*, absl::Status> errors;  // kError besides a failed step
    std::vector<std::pair<std::shared_ptr<Active>, FinishReason>> finished;
    for (size_t i = 0; i < batch.size(); ++i) {
      Active& a = *batch[i];
      if (!logits.ok()) {
        finished.emplace_back(batch[i], FinishReason::kError);
        continue;
      }
      absl::Span<const float> row(logits->data() + i * vocab, vocab);
      if (a.request.return_logits && a.callbacks.on_logits) {
        a.callbacks.on_logits(std::vector<float>(row.begin(), row.end()));
      }
      const uint64_t draw = a.request.next_step + a.generated - 1;
      const int32_t token = a.guided.has_value()
                                ? a.guided->Sample(row, a.request.sampling, draw, &a.history)
                                : SampleToken(row, a.request.sampling, draw, &a.history);
      if (token < 0 || (a.guided.has_value() && !a.guided->Accept(token).ok())) {
        // The grammar allows nothing the vocabulary spells (a grammar/vocabulary mismatch).
        errors[&a] = absl::InternalError(
            absl::StrCat("request ", a.request.id, ": the grammar allows no token here"));
        finished.emplace_back(batch[i], FinishReason::kError);
        continue;
      }
      ++a.generated;
      a.last_token = token;
      if (UsesPenalties(a.request.sampling)) a.history.AddOutput(token);
      const auto& stops = a.request.stop_ids;
      if (std::find(stops.begin(), stops.end(), token) != stops.end()) {
        finished.emplace_back(batch[i], FinishReason::kStop);
        continue;
      }
      if (a.request.sampling.logprobs >= 0 && a.callbacks.on_logprobs) {
        a.callbacks.on_logprobs(ComputeLogprobs(row, token, a.request.sampling.logprobs));
      }
      a.callbacks.on_token(token);
      if (a.guided.has_value() && a.guided->IsTerminated()) {
        finished.emplace_back(batch[i], FinishReason::kStop);
      } else if (a.generated >= a.request.max_new_tokens) {
        finished.emplace_back(batch[i], FinishReason::kLength);
      }
    }
    {
      absl::MutexLock lock(&mu_);
      for (auto& [a, reason] : finished)
        running_.erase(std::find(running_.begin(), running_.end(), a));
    }
    for (auto& [a, reason] : finished) {
      absl::Status status = absl::OkStatus();
      if (reason == FinishReason::kError) {
        status = errors.contains(a.get()) ? errors[a.get()] : logits.status();
      }
      Finish(*a, std::move(status), reason);
    }
  }
}

}  // namespace tandem
