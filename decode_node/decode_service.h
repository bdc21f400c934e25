// gRPC adapter of DecodeNode: Decode streams the engine's events to the caller; Status reports
// load. Until SetNode() is called (model loading) every RPC returns UNAVAILABLE.
#pragma once

#include <atomic>

#include "decode_node/decode_node.h"
#include "tandem/v1/decode.grpc.pb.h"

namespace tandem {

class DecodeServiceImpl final : public v1::DecodeService::Service {
 public:
  void SetNode(DecodeNode* node) { node_.store(node); }

  grpc::Status Decode(grpc::ServerContext* ctx, const v1::DecodeRequest* req,
                      grpc::ServerWriter<v1::DecodeEvent>* writer) override;
  grpc::Status Status(grpc::ServerContext* ctx, const v1::StatusRequest* req,
                      v1::InstanceStatus* resp) override;

 private:
  std::atomic<DecodeNode*> node_{nullptr};
};

}  // namespace tandem
