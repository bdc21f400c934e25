#include "prefill_node/prefill_service.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/request_log.h"
#include "kv_transfer/ucx/metadata_proto.h"
#include "proto/convert/kv_handle_proto.h"
#include "proto/convert/kv_layout_proto.h"
#include "proto/convert/sampling_proto.h"
#include "serving/grpc_status.h"
#include "serving/request_id.h"
#include "serving/unary_reactors.h"

namespace tandem {
namespace {

absl::Time DeadlineOf(const grpc::ServerContextBase* ctx) {
  const auto d = ctx->deadline();
  if (d == std::chrono::system_clock::time_point::max()) return absl::InfiniteFuture();
  return absl::FromChrono(d);
}

// Hashes a Status lists at most (most recently used first): about 9 KB on the wire, the leading
// blocks of every recently used prompt on a typical instance.
constexpr int32_t kPrefixDigestMaxHashes = 1024;

// KvProgress messages that may wait to be written before a WatchKv's thread waits for the client.
constexpr size_t kWatchWriteQueue = 1;

grpc::Status Starting() {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                      "prefill instance is starting (loading the model)");
}

grpc::Status Draining() {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                      "prefill instance is draining (shutting down): no new Prefill calls");
}

grpc::Status TooManyCalls(int64_t max) {
  return grpc::Status(
      grpc::StatusCode::RESOURCE_EXHAUSTED,
      absl::StrCat("prefill instance is running its most Prefill and WatchKv calls at once (", max,
                   "): retry later or elsewhere"));
}

}  // namespace

grpc::ServerUnaryReactor* PrefillServiceImpl::Prefill(grpc::CallbackServerContext* ctx,
                                                      const v1::PrefillRequest* req,
                                                      v1::PrefillResponse* resp) {
  auto* call = new CancellableUnaryReactor();
  const absl::Time start = absl::Now();
  auto refuse = [&](const grpc::Status& status) {
    LogPrefill(ctx, req, resp, status, start, 0);
    call->Finish(status);
    return call;
  };
  PrefillNode* node = node_.load();
  if (node == nullptr) return refuse(Starting());
  // Refused while draining (the router retries elsewhere) or when the queue is full.
  absl::StatusOr<DrainGate::Pass> pass = drain_gate_.Admit(node->Load().running);
  if (!pass.ok()) {
    return refuse(pass.status().code() == absl::StatusCode::kUnavailable
                      ? Draining()
                      : ToGrpcStatus(pass.status()));
  }
  const bool spawned = threads_.TrySpawn(
      [this, ctx, req, resp, call, node, start, pass = *std::move(pass)]() mutable {
        int64_t cached_tokens = 0;
        grpc::Status status;
        {
          const DrainGate::Pass held = std::move(pass);  // returned before the log line
          status = RunPrefill(node, ctx, req, call->cancel(), resp, &cached_tokens);
        }
        LogPrefill(ctx, req, resp, status, start, cached_tokens);
        call->Finish(std::move(status));  // may delete the reactor, and end the call
      });
  if (!spawned) return refuse(TooManyCalls(threads_.max_threads()));
  return call;
}

void PrefillServiceImpl::LogPrefill(const grpc::CallbackServerContext* ctx,
                                    const v1::PrefillRequest* req, const v1::PrefillResponse* resp,
                                    const grpc::Status& status, absl::Time start,
                                    int64_t cached_tokens) {
  const absl::Duration took = absl::Now() - start;
  if (status.ok() && metrics_ != nullptr) {
    metrics_->prompt_tokens->Increment(static_cast<double>(req->prompt_ids_size()));
  }
  const std::string request_id = RequestIdFromMetadata(*ctx, req->request_id());
  RequestLogLine line;
  line.Add("request_id", request_id);
  if (req->request_id() != request_id) line.Add("node_request_id", req->request_id());
  line.Add("outcome", absl::StatusCodeToString(FromGrpcStatus(status).code()))
      .Add("prompt_tokens", req->prompt_ids_size())
      .Add("generated_tokens", status.ok() && !req->early_handle() ? 1 : 0)
      .AddMillis("prefill_ms", took);  // queue + compute: the engine does not split them
  // Pipelined: the call ended at admission; WatchKv's line tells the rest.
  if (req->early_handle()) line.Add("early_handle", "true");
  if (status.ok()) {
    line.Add("kv_blocks", resp->kv().block_table_size()).Add("cached_tokens", cached_tokens);
  }
  if (!status.ok()) line.Add("error", status.error_message());
  WriteLogLine("tandem-prefill", line.str());
}

grpc::Status PrefillServiceImpl::RunPrefill(PrefillNode* node,
                                            const grpc::CallbackServerContext* ctx,
                                            const v1::PrefillRequest* req,
                                            const CancellationToken& cancel,
                                            v1::PrefillResponse* resp, int64_t* cached_tokens) {
  PrefillCall call;
  call.request_id = req->request_id();
  call.prompt.assign(req->prompt_ids().begin(), req->prompt_ids().end());
  call.sampling = FromProto(req->sampling());
  call.sample_step = req->sample_step();
  call.max_new_tokens = req->max_new_tokens();
  call.lease = absl::Milliseconds(req->lease_ms());
  call.deadline = DeadlineOf(ctx);
  call.choices = req->n() == 0 ? 1 : req->n();
  // `cancel`: the client's cancel (the call's OnCancel), which the node waits on.
  absl::StatusOr<PrefillOutcome> out = req->early_handle()
                                           ? node->StartPipelined(std::move(call), cancel)
                                           : node->Prefill(std::move(call), cancel);
  if (!out.ok()) return ToGrpcStatus(out.status());
  *cached_tokens = out->cached_tokens;
  resp->set_cached_tokens(out->cached_tokens);
  if (req->early_handle()) {
    resp->set_kv_pending(true);
  } else {
    resp->set_first_token(out->first_token);
    if (req->sampling().has_logprobs()) {
      *resp->mutable_first_logprobs() = ToProto(out->first_logprobs);
    }
    for (const int32_t t : out->choice_tokens) resp->add_choice_first_tokens(t);
    if (req->sampling().has_logprobs()) {
      for (const TokenLogprobs& lp : out->choice_logprobs) {
        *resp->add_choice_first_logprobs() = ToProto(lp);
      }
    }
  }
  KvHandle kv;
  kv.engine_id = node->engine_id();
  kv.epoch = node->epoch();
  kv.request_id = req->request_id();
  kv.block_table = out->block_table;
  kv.num_tokens = out->num_tokens;
  kv.layout = node->layout();
  kv.lease_expiry = out->lease_expiry;
  kv.generation = out->generation;
  kv.prefill_address = node->advertised_address();
  kv.block_generations = out->block_generations;
  kv.kv_digests = out->kv_digests;
  *resp->mutable_kv() = ToProto(kv);
  return grpc::Status::OK;
}

grpc::ServerWriteReactor<v1::KvProgress>* PrefillServiceImpl::WatchKv(
    grpc::CallbackServerContext* ctx, const v1::WatchKvRequest* req) {
  auto* stream = new Watch(kWatchWriteQueue);
  WatchRecord record;
  PrefillNode* node = node_.load();
  if (node == nullptr) {
    EndWatch(ctx, req, Starting(), record, stream);
    return stream;
  }
  absl::StatusOr<std::shared_ptr<const KvProgress>> progress =
      node->WatchKv(req->request_id(), req->generation());
  if (!progress.ok()) {
    EndWatch(ctx, req, ToGrpcStatus(progress.status()), record, stream);
    return stream;
  }
  const bool spawned = threads_.TrySpawn(
      [this, ctx, req, stream, record, progress = *std::move(progress)]() mutable {
        grpc::Status status = RunWatch(*progress, DeadlineOf(ctx), stream, &record);
        EndWatch(ctx, req, std::move(status), record, stream);
      });
  if (!spawned) EndWatch(ctx, req, TooManyCalls(threads_.max_threads()), record, stream);
  return stream;
}

grpc::Status PrefillServiceImpl::RunWatch(const KvProgress& progress, absl::Time deadline,
                                          Watch* stream, WatchRecord* record) {
  // The client's cancel (the stream's OnCancel, or a failed write) wakes the wait at once.
  const CancellationToken& cancel = stream->cancel();
  absl::Time last_write = absl::InfinitePast();
  while (true) {
    const KvProgressSnapshot now = progress.Await(record->seen, kWatchHeartbeat, &cancel);
    if (!now.status.ok()) return ToGrpcStatus(now.status);
    if (!now.done && cancel.cancelled()) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled");
    }
    if (!(now == record->seen) || absl::Now() - last_write >= kWatchHeartbeat) {
      v1::KvProgress msg;
      msg.set_tokens_ready(now.tokens_ready);
      msg.set_done(now.done);
      if (now.done) {
        msg.set_first_token(now.first_token);
        for (uint32_t d : now.kv_digests) msg.add_kv_digests(d);
        if (now.first_logprobs.has_value()) {
          *msg.mutable_first_logprobs() = ToProto(*now.first_logprobs);
        }
      }
      if (!stream->Send(std::move(msg))) {
        return grpc::Status(grpc::StatusCode::CANCELLED, "the watcher went away");
      }
      ++record->messages;
      last_write = absl::Now();
    }
    record->seen = now;
    if (now.done) return grpc::Status::OK;
    if (absl::Now() > deadline) {
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                          "the watch's deadline passed before the prefill finished");
    }
  }
}

void PrefillServiceImpl::EndWatch(const grpc::CallbackServerContext* ctx,
                                  const v1::WatchKvRequest* req, grpc::Status status,
                                  const WatchRecord& record, Watch* stream) {
  RequestLogLine line;
  line.Add("request_id", RequestIdFromMetadata(*ctx, req->request_id()))
      .Add("watch_kv", "true")
      .Add("generation", req->generation())
      .Add("outcome", absl::StatusCodeToString(FromGrpcStatus(status).code()))
      .Add("tokens_ready", std::max<int64_t>(record.seen.tokens_ready, 0))
      .Add("messages", record.messages)
      .AddMillis("watch_ms", absl::Now() - record.start);
  if (!status.ok()) line.Add("error", status.error_message());
  WriteLogLine("tandem-prefill", line.str());
  stream->Close(std::move(status));  // may delete the stream, and end the call
}

grpc::ServerUnaryReactor* PrefillServiceImpl::ReleaseKv(grpc::CallbackServerContext* ctx,
                                                        const v1::ReleaseKvRequest* req,
                                                        v1::ReleaseKvResponse* resp) {
  PrefillNode* node = node_.load();
  if (node == nullptr) return FinishUnary(ctx, Starting());
  resp->set_lease_held(node->ReleaseKv(
      req->request_id(), req->epoch(), req->generation(),
      absl::Span<const int32_t>(req->block_table().data(), req->block_table_size()),
      absl::Span<const uint32_t>(req->block_generations().data(), req->block_generations_size())));
  return FinishUnary(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* PrefillServiceImpl::RenewLease(grpc::CallbackServerContext* ctx,
                                                         const v1::RenewLeaseRequest* req,
                                                         v1::RenewLeaseResponse* resp) {
  PrefillNode* node = node_.load();
  if (node == nullptr) return FinishUnary(ctx, Starting());
  const std::optional<absl::Time> expiry =
      node->RenewLease(req->request_id(), req->generation(), absl::Milliseconds(req->extend_ms()));
  resp->set_renewed(expiry.has_value());
  if (expiry.has_value()) resp->set_lease_expiry_unix_ms(absl::ToUnixMillis(*expiry));
  return FinishUnary(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* PrefillServiceImpl::GetTransferMetadata(
    grpc::CallbackServerContext* ctx, const v1::GetTransferMetadataRequest*,
    v1::TransferMetadata* resp) {
  PrefillNode* node = node_.load();
  if (node == nullptr) return FinishUnary(ctx, Starting());
  *resp = ToProto(node->metadata());
  return FinishUnary(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* PrefillServiceImpl::Status(grpc::CallbackServerContext* ctx,
                                                     const v1::StatusRequest*,
                                                     v1::InstanceStatus* resp) {
  PrefillNode* node = node_.load();
  if (node == nullptr) return FinishUnary(ctx, Starting());
  resp->set_engine_id(node->engine_id());
  resp->set_role(v1::INSTANCE_ROLE_PREFILL);
  resp->set_draining(drain_gate_.draining());
  resp->set_model(node->model_name());
  *resp->mutable_layout() = ToProto(node->layout());
  const NodeLoad l = node->Load();
  v1::InstanceLoad* load = resp->mutable_load();
  load->set_running(l.running);
  load->set_queued(l.queued);
  load->set_free_blocks(l.free_blocks);
  load->set_total_blocks(l.total_blocks);
  load->set_leases(l.leases);
  load->set_pending_prompt_tokens(l.pending_prompt_tokens);
  if (const std::optional<PrefixCacheDigestView> d = node->PrefixDigest(kPrefixDigestMaxHashes)) {
    v1::PrefixCacheDigest* pc = resp->mutable_prefix_cache();
    pc->set_salt(d->salt);
    pc->set_block_tokens(d->block_tokens);
    for (uint64_t h : d->block_hashes) pc->add_block_hashes(h);
    pc->set_truncated(d->truncated);
  }
  resp->set_epoch(node->epoch());
  resp->set_address(node->advertised_address());
  resp->set_uptime_ms(absl::ToInt64Milliseconds(absl::Now() - node->started()));
  resp->set_block_free_errors(l.block_free_errors);
  for (int64_t bytes : node->weight_bytes_per_rank()) resp->add_weight_bytes_per_rank(bytes);
  return FinishUnary(ctx, grpc::Status::OK);
}

}  // namespace tandem
