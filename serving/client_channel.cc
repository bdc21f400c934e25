#include "serving/client_channel.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/support/client_interceptor.h>

#include <utility>
#include <vector>

namespace tandem {
namespace {

class AuthorizationInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit AuthorizationInterceptor(const std::string* value) : value_(value) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({"authorization", *value_});
    }
    methods->Proceed();
  }

 private:
  const std::string* const value_;  // owned by the factory, which the channel keeps
};

class AuthorizationInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit AuthorizationInterceptorFactory(std::string value) : value_(std::move(value)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new AuthorizationInterceptor(&value_);
  }

 private:
  const std::string value_;
};

}  // namespace

std::shared_ptr<grpc::Channel> CreateClientChannel(
    const std::string& address, std::shared_ptr<grpc::ChannelCredentials> credentials,
    const std::string& api_key, const grpc::ChannelArguments& args) {
  if (credentials == nullptr) credentials = grpc::InsecureChannelCredentials();
  if (api_key.empty()) return grpc::CreateCustomChannel(address, credentials, args);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> factories;
  factories.push_back(std::make_unique<AuthorizationInterceptorFactory>("Bearer " + api_key));
  return grpc::experimental::CreateCustomChannelWithInterceptors(address, credentials, args,
                                                                 std::move(factories));
}

}  // namespace tandem
