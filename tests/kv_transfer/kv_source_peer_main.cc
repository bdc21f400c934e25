// Child process of the two-process KV transfer tests: a UcxTransferSource serving filled pools
// (kv_transfer/ucx/testing/source_peer.h describes the protocol on fds 3 and 4).
#include "kv_transfer/ucx/testing/source_peer.h"

int main() {
  return tandem::testing::RunSourcePeer(tandem::testing::kPeerInFd, tandem::testing::kPeerOutFd);
}
