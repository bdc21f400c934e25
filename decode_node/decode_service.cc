#include "decode_node/decode_service.h"

#include <atomic>
#include <deque>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/request_log.h"
#include "proto/convert/finish_reason_proto.h"
#include "proto/convert/kv_handle_proto.h"
#include "proto/convert/kv_layout_proto.h"
#include "proto/convert/sampling_proto.h"
#include "serving/grpc_status.h"
#include "serving/request_id.h"
#include "serving/unary_reactors.h"

namespace tandem {
namespace {

// The call's thread is woken by every event and by the client's cancel; this only bounds one
// wait (nothing is polled at this interval).
constexpr absl::Duration kEventWaitBound = absl::Seconds(1);

grpc::Status Starting() {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                      "decode instance is starting (loading the model)");
}

// Events from the engine thread to the call's thread, which sends them to the stream.
struct EventQueue {
  absl::Mutex mu;
  std::deque<v1::DecodeEvent> tokens ABSL_GUARDED_BY(mu);
  // From the sink's on_logprobs, for the token that comes next.
  std::optional<v1::TokenLogprobs> next_logprobs ABSL_GUARDED_BY(mu);
  bool done ABSL_GUARDED_BY(mu) = false;
  absl::Status status ABSL_GUARDED_BY(mu);
  FinishReason reason ABSL_GUARDED_BY(mu) = FinishReason::kLength;
  int32_t generated ABSL_GUARDED_BY(mu) = 0;
  // Choices (DecodeRequest.choices): those not ended yet; each ending choice's finish event is
  // queued in `tokens`, and `done` is set with the last. choice_failed: one ended with an error
  // or cancelled (status and reason are its), so the others are cancelled too.
  int32_t choices_left ABSL_GUARDED_BY(mu) = 0;
  bool choice_failed ABSL_GUARDED_BY(mu) = false;
};

// The sinks of a call with choices: events name their choice; a choice that ends well queues its
// finish event; the first error (or cancellation) is the call's status once every choice ended.
std::vector<DecodeSink> ChoiceSinks(const v1::DecodeRequest& req,
                                    const std::shared_ptr<EventQueue>& q,
                                    const DecodeMetrics* metrics) {
  {
    absl::MutexLock lock(&q->mu);
    q->choices_left = req.choices_size();
  }
  std::vector<DecodeSink> sinks;
  for (const v1::DecodeChoice& c : req.choices()) {
    const int32_t index = c.index();
    DecodeSink& sink = sinks.emplace_back();
    sink.on_token = [q, metrics, index](int32_t t) {
      if (metrics != nullptr) metrics->generation_tokens->Increment();
      absl::MutexLock lock(&q->mu);
      v1::DecodeEvent& ev = q->tokens.emplace_back();
      ev.set_token(t);
      ev.set_choice(index);
      if (q->next_logprobs.has_value()) {
        *ev.mutable_logprobs() = *std::move(q->next_logprobs);
        q->next_logprobs.reset();
      }
    };
    // The engine calls on_logprobs just before on_token for the same choice, on its one thread.
    sink.on_logprobs = [q](const TokenLogprobs& logprobs) {
      absl::MutexLock lock(&q->mu);
      q->next_logprobs = ToProto(logprobs);
    };
    sink.on_done = [q, index](absl::Status s, FinishReason reason, int32_t generated) {
      absl::MutexLock lock(&q->mu);
      q->generated += generated;
      if (s.ok() && (reason == FinishReason::kStop || reason == FinishReason::kLength)) {
        v1::DecodeEvent& ev = q->tokens.emplace_back();
        ev.set_choice(index);
        ev.mutable_finish()->set_reason(ToProto(reason));
        ev.mutable_finish()->set_generated(generated);
        if (!q->choice_failed) q->reason = reason;
      } else if (!q->choice_failed) {
        q->choice_failed = true;
        q->status = std::move(s);  // an error, or OK with kCancelled
        q->reason = reason;
      }
      if (--q->choices_left == 0) q->done = true;
    };
  }
  return sinks;
}

// Whether a failed Start() was the KV transfer's fault (handshake, pull, lease confirmation),
// rather than the request's (invalid), the capacity's or the client's.
bool IsTransferFailure(grpc::StatusCode code) {
  return code != grpc::StatusCode::OK && code != grpc::StatusCode::INVALID_ARGUMENT &&
         code != grpc::StatusCode::RESOURCE_EXHAUSTED && code != grpc::StatusCode::CANCELLED;
}

std::string StatusCodeName(const grpc::Status& status) {
  return absl::StatusCodeToString(FromGrpcStatus(status).code());
}

grpc::Status Draining() {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                      "decode instance is draining (shutting down): no new Decode calls");
}

grpc::Status TooManyCalls(int64_t max) {
  return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                      absl::StrCat("decode instance is running its most Decode calls at once (",
                                   max, "): retry later or elsewhere"));
}

}  // namespace

grpc::ServerWriteReactor<v1::DecodeEvent>* DecodeServiceImpl::Decode(
    grpc::CallbackServerContext* ctx, const v1::DecodeRequest* req) {
  auto* stream = new Stream(kDecodeWriteQueue);
  DecodeRecord record;
  DecodeNode* node = node_.load();
  if (node == nullptr) {
    EndCall(ctx, req, Starting(), record, stream);
    return stream;
  }
  // Refused while draining (the router retries elsewhere) or when the queue is full.
  absl::StatusOr<DrainGate::Pass> pass = drain_gate_.Admit(node->running());
  if (!pass.ok()) {
    EndCall(ctx, req,
            pass.status().code() == absl::StatusCode::kUnavailable ? Draining()
                                                                   : ToGrpcStatus(pass.status()),
            record, stream);
    return stream;
  }
  const bool spawned =
      threads_.TrySpawn([this, ctx, req, stream, node, record, pass = *std::move(pass)]() mutable {
        grpc::Status status;
        {
          const DrainGate::Pass held = std::move(pass);  // returned before the log line
          status = RunDecode(node, req, stream, &record);
        }
        EndCall(ctx, req, std::move(status), record, stream);
      });
  if (!spawned) EndCall(ctx, req, TooManyCalls(threads_.max_threads()), record, stream);
  return stream;
}

void DecodeServiceImpl::EndCall(const grpc::CallbackServerContext* ctx,
                                const v1::DecodeRequest* req, grpc::Status status,
                                const DecodeRecord& record, Stream* stream) {
  const std::string& peer = req->kv().prefill_address();
  const bool colocated = req->prompt_ids_size() > 0;
  if (metrics_ != nullptr && record.start_called && !colocated) {
    if (record.transfer.has_value()) {
      metrics_->RecordTransfer(peer, static_cast<double>(record.transfer->bytes),
                               static_cast<double>(record.transfer->micros) * 1e-6,
                               static_cast<double>(record.transfer->copies));
      if (req->pipelined()) {
        metrics_->pipelined_transfers->Increment();
        metrics_->pipelined_chunks_before_prefill_done->Increment(
            static_cast<double>(record.transfer->chunks_before_prefill_done));
      }
    } else if (IsTransferFailure(status.error_code())) {
      metrics_->transfer_failures->WithLabels({peer}).Increment();
    }
  }
  const absl::Duration transfer =
      absl::Microseconds(record.transfer.has_value() ? record.transfer->micros : 0);
  RequestLogLine line;
  const std::string request_id = RequestIdFromMetadata(*ctx, req->request_id());
  line.Add("request_id", request_id);
  if (req->request_id() != request_id) {
    line.Add("node_request_id", req->request_id());
  }
  line.Add("peer", peer).Add("outcome", StatusCodeName(status));
  if (status.ok()) line.Add("finish_reason", std::string(FinishReasonName(record.reason)));
  if (colocated) line.Add("colocated_prefill", "true");
  if (req->pipelined()) {
    const TransferStats none;
    const TransferStats& t = record.transfer.has_value() ? *record.transfer : none;
    line.Add("pipelined", "true")
        .Add("chunks", t.chunks)
        .Add("chunks_before_prefill_done", t.chunks_before_prefill_done);
  }
  line.Add("prompt_tokens", colocated ? int64_t{req->prompt_ids_size()} : req->kv().num_tokens())
      .Add("generated_tokens", record.generated)
      .AddMillis("queue_ms", record.setup - transfer)
      .AddMillis("transfer_ms", transfer)
      .Add("transfer_bytes", record.transfer.has_value() ? record.transfer->bytes : 0);
  if (record.transfer.has_value() && record.transfer->digests_verified) {
    line.Add("digests_verified", "true")
        .AddMillis("digest_ms", absl::Microseconds(record.transfer->digest_micros));
  }
  line.AddMillis("decode_ms", record.decode).AddMillis("total_ms", absl::Now() - record.start);
  if (!status.ok()) line.Add("error", status.error_message());
  WriteLogLine("tandem-decode", line.str());
  stream->Close(std::move(status));  // may delete the stream, and end the call
}

grpc::Status DecodeServiceImpl::RunDecode(DecodeNode* node, const v1::DecodeRequest* req,
                                          Stream* stream, DecodeRecord* record) {
  const bool colocated = req->prompt_ids_size() > 0;
  if (colocated && req->has_kv()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "a Decode call carries either prompt_ids (colocated prefill) or kv");
  }
  if (!colocated && req->resume()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "resume needs prompt_ids");
  }
  if (colocated && req->pipelined()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "pipelined needs kv (an early handle), not prompt_ids");
  }
  const bool choices = req->choices_size() > 0;
  if (choices && colocated) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "choices need kv (one prefill's KV shared by them), not prompt_ids");
  }
  DecodeCall call;
  call.request_id = req->request_id();
  call.first_token = req->first_token();
  if (!colocated) {
    absl::StatusOr<KvHandle> kv = KvHandleFromProto(req->kv());
    if (!kv.ok()) return ToGrpcStatus(kv.status());
    call.kv = *std::move(kv);
  }
  call.sampling = FromProto(req->sampling());
  call.max_new_tokens = req->max_new_tokens();
  call.stop_ids.assign(req->stop_ids().begin(), req->stop_ids().end());
  call.next_step = req->next_step();
  call.pipelined = req->pipelined();
  call.context_ids.assign(req->context_ids().begin(), req->context_ids().end());
  for (const v1::DecodeChoice& c : req->choices()) {
    call.choices.push_back(DecodeChoice{c.index(), c.first_token()});
  }
  auto q = std::make_shared<EventQueue>();
  // The client's cancel (the stream's OnCancel, or a failed write).
  const CancellationToken& cancel = stream->cancel();
  // A cancel takes and drops q->mu, so the event wait below looks at its condition again.
  const CancelCallback wake = cancel.OnCancel([q] { absl::MutexLock touch(&q->mu); });
  DecodeSink sink;
  // A pipelined call's first token was sampled by the prefill node: not counted as generated here.
  sink.on_token = [q, metrics = metrics_,
                   uncounted = std::make_shared<std::atomic<bool>>(req->pipelined())](int32_t t) {
    if (metrics != nullptr && !uncounted->exchange(false)) metrics->generation_tokens->Increment();
    absl::MutexLock lock(&q->mu);
    v1::DecodeEvent& ev = q->tokens.emplace_back();
    ev.set_token(t);
    if (q->next_logprobs.has_value()) {
      *ev.mutable_logprobs() = *std::move(q->next_logprobs);
      q->next_logprobs.reset();
    }
  };
  sink.on_logprobs = [q](const TokenLogprobs& logprobs) {
    absl::MutexLock lock(&q->mu);
    q->next_logprobs = ToProto(logprobs);
  };
  sink.on_done = [q](absl::Status s, FinishReason reason, int32_t generated) {
    absl::MutexLock lock(&q->mu);
    q->done = true;
    q->status = std::move(s);
    q->reason = reason;
    q->generated = generated;
  };
  record->start_called = true;
  absl::StatusOr<TransferStats> started;
  if (colocated) {
    ColocatedCall cc;
    cc.request_id = call.request_id;
    cc.prompt.assign(req->prompt_ids().begin(), req->prompt_ids().end());
    cc.sampling = call.sampling;
    cc.max_new_tokens = call.max_new_tokens;
    cc.stop_ids = call.stop_ids;
    cc.next_step = call.next_step;
    if (req->resume()) cc.resume_token = call.first_token;
    const absl::Status s = node->StartColocated(std::move(cc), std::move(sink));
    started = s.ok() ? absl::StatusOr<TransferStats>(TransferStats{}) : s;
  } else if (choices) {
    started = node->StartChoices(call, ChoiceSinks(*req, q, metrics_), cancel);
  } else {
    started = node->Start(call, std::move(sink), cancel);
  }
  record->setup = absl::Now() - record->start;
  if (!started.ok()) return ToGrpcStatus(started.status());
  record->transfer = *started;

  // What served the call rides on its first event (the router's provenance).
  std::optional<v1::DecodeServed> served;
  served.emplace();
  *served->mutable_layout() = ToProto(node->layout());
  served->set_colocated(colocated);
  served->set_kv_bytes(started->bytes);
  served->set_digests_verified(started->digests_verified);
  served->set_digest_us(started->digest_micros);
  bool cancel_sent = false;
  while (true) {
    std::deque<v1::DecodeEvent> tokens;
    bool done = false;
    bool choice_failed = false;
    {
      absl::MutexLock lock(&q->mu);
      auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu) {
        return q->done || !q->tokens.empty() ||
               (!cancel_sent && (cancel.cancelled() || q->choice_failed));
      };
      q->mu.AwaitWithTimeout(absl::Condition(&ready), kEventWaitBound);
      tokens.swap(q->tokens);
      done = q->done;
      choice_failed = q->choice_failed;
    }
    for (v1::DecodeEvent& ev : tokens) {
      if (ev.has_finish()) {  // a choice's end
        ev.mutable_finish()->set_transfer_us(started->micros);
        ev.mutable_finish()->set_transfer_bytes(started->bytes);
      }
      if (served.has_value()) {
        *ev.mutable_served() = *std::move(served);
        served.reset();
      }
      if (!cancel_sent && !stream->Send(std::move(ev))) {
        node->Cancel(call.request_id);  // the stream is gone: stop generating
        cancel_sent = true;
      }
    }
    if (done) break;
    if (!cancel_sent && (cancel.cancelled() || choice_failed)) {
      node->Cancel(call.request_id);
      cancel_sent = true;
    }
  }
  absl::Status status;
  {
    absl::MutexLock lock(&q->mu);
    record->decode = absl::Now() - record->start - record->setup;
    record->generated = q->generated;
    record->reason = q->reason;
    status = q->status;
  }
  if (!status.ok()) return ToGrpcStatus(status);
  if (record->reason == FinishReason::kCancelled || cancel_sent) {
    return grpc::Status(grpc::StatusCode::CANCELLED, "decode cancelled");
  }
  if (choices) return grpc::Status::OK;  // each choice's finish event is written
  v1::DecodeEvent ev;
  v1::DecodeFinish* fin = ev.mutable_finish();
  fin->set_reason(ToProto(record->reason));
  fin->set_generated(record->generated);
  fin->set_transfer_us(started->micros);
  fin->set_transfer_bytes(started->bytes);
  if (served.has_value()) *ev.mutable_served() = *std::move(served);
  stream->Send(std::move(ev));  // a client gone by now sees the stream end anyway
  return grpc::Status::OK;
}

grpc::ServerUnaryReactor* DecodeServiceImpl::Status(grpc::CallbackServerContext* ctx,
                                                    const v1::StatusRequest*,
                                                    v1::InstanceStatus* resp) {
  DecodeNode* node = node_.load();
  if (node == nullptr) return FinishUnary(ctx, Starting());
  resp->set_engine_id(node->engine_id());
  resp->set_role(v1::INSTANCE_ROLE_DECODE);
  resp->set_draining(drain_gate_.draining());
  resp->set_model(node->model_name());
  *resp->mutable_layout() = ToProto(node->layout());
  v1::InstanceLoad* load = resp->mutable_load();
  load->set_running(node->running());
  load->set_queued(node->queued());
  load->set_free_blocks(node->free_blocks());
  load->set_total_blocks(node->total_blocks());
  resp->set_address(node->advertised_address());
  resp->set_uptime_ms(absl::ToInt64Milliseconds(absl::Now() - node->started()));
  resp->set_block_free_errors(node->block_free_errors());
  for (int64_t bytes : node->weight_bytes_per_rank()) resp->add_weight_bytes_per_rank(bytes);
  return FinishUnary(ctx, grpc::Status::OK);
}

}  // namespace tandem
