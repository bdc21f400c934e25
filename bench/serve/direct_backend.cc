#include "bench/serve/direct_backend.h"

#include <grpcpp/client_context.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/sync_stream.h>
#include <unistd.h>

#include <atomic>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace tandem::bench {
namespace {

void Failed(RequestRecord& rec, const char* stage, const grpc::Status& status) {
  rec.error = absl::StrCat(
      stage, ":", absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code())));
  rec.error_detail = status.error_message();
}

std::string NextRequestId() {
  static std::atomic<uint64_t> counter{0};
  return absl::StrCat("bench-direct-", ::getpid(), "-", counter.fetch_add(1));
}

}  // namespace

DirectBackend::DirectBackend(const std::string& prefill_address, const std::string& decode_address,
                             std::shared_ptr<grpc::ChannelCredentials> credentials)
    : prefill_(v1::PrefillService::NewStub(grpc::CreateChannel(
          prefill_address,
          credentials != nullptr ? credentials : grpc::InsecureChannelCredentials()))),
      decode_(v1::DecodeService::NewStub(grpc::CreateChannel(
          decode_address,
          credentials != nullptr ? credentials : grpc::InsecureChannelCredentials()))) {}

absl::Status DirectBackend::Check(const BenchRequest& request) {
  if (request.prompt_ids.empty()) {
    return absl::InvalidArgumentError(
        "--backend=direct sends token ids only (no tokenizer): use random prompts, not a "
        "--dataset");
  }
  return absl::OkStatus();
}

RequestRecord DirectBackend::Send(const BenchRequest& request, absl::Duration timeout) {
  RequestRecord rec;
  v1::SamplingParams sampling;
  sampling.set_temperature(0);
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + timeout;

  v1::PrefillRequest prefill;
  prefill.set_request_id(NextRequestId());
  prefill.mutable_prompt_ids()->Add(request.prompt_ids.begin(), request.prompt_ids.end());
  *prefill.mutable_sampling() = sampling;
  prefill.set_sample_step(0);
  prefill.set_max_new_tokens(request.max_tokens);
  v1::PrefillResponse prefilled;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(deadline));
    const grpc::Status status = prefill_->Prefill(&ctx, prefill, &prefilled);
    if (!status.ok()) {
      rec.e2e = absl::Now() - start;
      Failed(rec, "prefill", status);
      return rec;
    }
  }
  rec.chunk_times.push_back(absl::Now() - start);
  rec.output_tokens = 1;
  rec.prompt_tokens = static_cast<int64_t>(request.prompt_ids.size());

  if (request.max_tokens == 1) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(deadline));
    v1::ReleaseKvRequest release;
    release.set_request_id(prefilled.kv().request_id());
    release.set_epoch(prefilled.kv().epoch());
    release.set_generation(prefilled.kv().generation());
    v1::ReleaseKvResponse released;
    const grpc::Status status = prefill_->ReleaseKv(&ctx, release, &released);
    rec.e2e = absl::Now() - start;
    if (!status.ok()) {
      Failed(rec, "release", status);
      return rec;
    }
    rec.server_output_tokens = 1;
    rec.ok = true;
    return rec;
  }

  v1::DecodeRequest decode;
  decode.set_request_id(prefilled.kv().request_id().empty() ? prefill.request_id()
                                                            : prefilled.kv().request_id());
  decode.set_first_token(prefilled.first_token());
  *decode.mutable_kv() = prefilled.kv();
  *decode.mutable_sampling() = sampling;
  decode.set_max_new_tokens(request.max_tokens);
  decode.set_next_step(1);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(deadline));
  std::unique_ptr<grpc::ClientReader<v1::DecodeEvent>> reader = decode_->Decode(&ctx, decode);
  v1::DecodeEvent event;
  bool finished = false;
  while (reader->Read(&event)) {
    if (event.has_token()) {
      rec.chunk_times.push_back(absl::Now() - start);
      ++rec.output_tokens;
    } else if (event.has_finish()) {
      finished = true;
      rec.server_output_tokens = event.finish().generated();
    }
  }
  const grpc::Status status = reader->Finish();
  rec.e2e = absl::Now() - start;
  if (!status.ok()) {
    Failed(rec, "decode", status);
  } else if (!finished) {
    rec.error = "decode:INCOMPLETE_STREAM";
    rec.error_detail = "the decode stream ended without a finish event";
  } else {
    rec.ok = true;
  }
  return rec;
}

}  // namespace tandem::bench
