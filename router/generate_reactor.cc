#include "router/generate_reactor.h"

#include <grpcpp/server_context.h>

#include <utility>

#include "absl/time/time.h"
#include "proto/convert/sampling_proto.h"

namespace tandem {

void GenerateReactor::OnToken(GeneratedToken token) {
  v1::GenerateResponse response;
  v1::TokenChunk* chunk = response.mutable_token();
  chunk->set_id(token.id);
  if (token.logprobs.has_value()) *chunk->mutable_logprobs() = ToProto(*token.logprobs);
  chunk->set_text(std::move(token.text));
  chunk->set_index(token.index);
  chunk->set_choice(token.choice);
  Send(std::move(response));
}

void GenerateReactor::OnChoiceEnd(ChoiceEnded end) {
  v1::GenerateResponse response;
  v1::ChoiceEnd* out = response.mutable_choice_end();
  out->set_choice(end.choice);
  out->set_finish_reason(std::move(end.finish_reason));
  out->set_text_tail(std::move(end.text_tail));
  out->set_completion_tokens(end.completion_tokens);
  Send(std::move(response));
}

void GenerateReactor::OnDone(GenerateDone done) {
  v1::GenerateResponse response;
  v1::GenerateFinal* final = response.mutable_final();
  final->set_finish_reason(std::move(done.finish_reason));
  final->mutable_usage()->set_prompt_tokens(done.prompt_tokens);
  final->mutable_usage()->set_completion_tokens(done.completion_tokens);
  final->mutable_usage()->set_cached_tokens(done.cached_tokens);
  final->set_request_id(std::move(done.request_id));
  final->set_text_tail(std::move(done.text_tail));
  final->set_retries(done.retries);
  if (done.ttft_us.has_value()) final->set_ttft_us(*done.ttft_us);
  final->set_total_us(done.total_us);
  Send(std::move(response));
}

GenerateReactor* GenerateReactor::Start(grpc::CallbackServerContext* context,
                                        const v1::GenerateRequest* request, const RouterDeps* deps,
                                        CallThreads* threads) {
  auto* reactor = new GenerateReactor(context);
  const absl::Time deadline = absl::FromChrono(context->deadline());
  const bool started = threads->TrySpawn([reactor, request, deps, deadline] {
    const grpc::Status status = RunGenerate(*deps, *request, deadline, reactor->cancel(), reactor);
    reactor->Close(status);
  });
  if (!started) {
    reactor->Close(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                "router request threads exhausted; retry later"));
  }
  return reactor;
}

void GenerateReactor::OnProvenance(const Provenance& provenance) {
  if (!provenance.final) return;
  std::string json = ProvenanceJson(provenance);
  absl::MutexLock lock(&mu_);
  provenance_ = std::move(json);
}

void GenerateReactor::BeforeFinish() {
  std::string provenance;
  {
    absl::MutexLock lock(&mu_);
    provenance = std::move(provenance_);
  }
  if (!provenance.empty()) context_->AddTrailingMetadata("x-tandem-provenance", provenance);
}

}  // namespace tandem
