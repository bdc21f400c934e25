#include "tests/engine/generate_all.h"

#include <memory>
#include <string>

#include "absl/synchronization/notification.h"

namespace tandem::testing {

std::vector<GenerateRequest> GreedyRequests(const std::vector<std::vector<int32_t>>& prompts,
                                            int32_t max_new_tokens) {
  std::vector<GenerateRequest> requests;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerateRequest req;
    req.id = std::to_string(i);
    req.prompt = prompts[i];
    req.max_new_tokens = max_new_tokens;
    req.return_logits = true;
    requests.push_back(std::move(req));
  }
  return requests;
}

std::vector<absl::StatusOr<GenerateResult>> GenerateAll(CombinedEngine& engine,
                                                        std::vector<GenerateRequest> requests,
                                                        absl::Duration timeout) {
  struct Slot {
    absl::Notification done;
    absl::StatusOr<GenerateResult> result = absl::UnknownError("pending");
  };
  std::vector<std::shared_ptr<Slot>> slots;
  for (GenerateRequest& req : requests) {
    auto slot = std::make_shared<Slot>();
    slots.push_back(slot);
    const absl::Status s = engine.Generate(
        std::move(req), [](int32_t) {},
        [slot](absl::StatusOr<GenerateResult> r) {
          slot->result = std::move(r);
          slot->done.Notify();
        });
    if (!s.ok()) {
      slot->result = s;
      slot->done.Notify();
    }
  }
  std::vector<absl::StatusOr<GenerateResult>> out;
  for (auto& slot : slots) {
    if (!slot->done.WaitForNotificationWithTimeout(timeout)) {
      out.push_back(absl::DeadlineExceededError("generation did not finish in time"));
    } else {
      out.push_back(slot->result);
    }
  }
  return out;
}

}  // namespace tandem::testing
