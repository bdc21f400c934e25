// A serving endpoint the load generator drives: Send streams one request and records what was
// observed (RequestRecord; `sent_at` is filled by the caller). Send never throws and always
// returns a record: failures are records with ok = false and an error class.
//
// Thread-safety: Send is called from many threads at once.
#pragma once

#include "absl/time/time.h"
#include "bench/serve/request_record.h"

namespace tandem::bench {

class Backend {
 public:
  virtual ~Backend() = default;
  // `timeout` bounds the whole call (connect to end of stream).
  virtual RequestRecord Send(const BenchRequest& request, absl::Duration timeout) = 0;
};

}  // namespace tandem::bench
