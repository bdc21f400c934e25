#include "common/prometheus_text.h"

#include "prometheus/text_serializer.h"

namespace tandem {

std::string RenderPrometheusText(const MetricsRegistry& registry) {
  return prometheus::TextSerializer().Serialize(registry.Collect());
}

}  // namespace tandem
