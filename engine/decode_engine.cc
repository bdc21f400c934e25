#include "engine/decode_engine.h"

#include <algorithm>

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

absl::Status DecodeEngine::Add(DecodeRequest request, DecodeCallbacks callbacks) {
  TANDEM_RETURN_IF_ERROR(CheckTokenBudget(request.max_new_tokens, "max_new_tokens"));
  TANDEM_RETURN_IF_ERROR(ValidateSamplingParams(request.sampling));
  TANDEM_RETURN_IF_ERROR(ValidateSamplingIds(request.sampling, instance_->config().vocab_size));
  TANDEM_RETURN_IF_ERROR(
      CheckTokenId(request.first_token, instance_->config().vocab_size, "first token"));
  const bool penalties = UsesPenalties(request.sampling);
  if (penalties) {
    if (static_cast<int64_t>(request.context.size()) != request.prompt_len) {
      return absl::InvalidArgumentError(
          absl::StrCat("sampling penalties need the context's token ids: got ",
                       request.context.size(), " for a prompt_len of ", request.prompt_len));
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
  auto a = std::make_shared<Active>();
  a->request = std::move(request);
  a->callbacks = std::move(callbacks);
  a->last_token = a->request.first_token;
  if (penalties) {
    a->history = TokenHistory(a->request.context, static_cast<int64_t>(a->request.next_step) - 1);
    a->history.AddOutput(a->request.first_token);
  }
  a->request.context = {};  // the history holds what sampling needs
  const std::vector<int32_t>& stops = a->request.stop_ids;
  const bool done_already = std::find(stops.begin(), stops.end(), a->last_token) != stops.end() ||
                            a->request.max_new_tokens <= 1;
  if (done_already) {
    const bool stop = std::find(stops.begin(), stops.end(), a->last_token) != stops.end();
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
  auto mark = [&](auto& list) {
    for (auto& a : list) {
      if (a->request.id == id && !a->cancelled) return a->cancelled = true;
    }
    return false;
  };
  return mark(queue_) || mark(running_);
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
      const int32_t token =
          SampleToken(row, a.request.sampling, a.request.next_step + a.generated - 1, &a.history);
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
      if (a.generated >= a.request.max_new_tokens)
        finished.emplace_back(batch[i], FinishReason::kLength);
    }
    {
      absl::MutexLock lock(&mu_);
      for (auto& [a, reason] : finished)
        running_.erase(std::find(running_.begin(), running_.end(), a));
    }
    for (auto& [a, reason] : finished) {
      Finish(*a, reason == FinishReason::kError ? logits.status() : absl::OkStatus(), reason);
    }
  }
}

}  // namespace tandem
