#include "model/chat_template/chat_template.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "model/chat_template/interpreter.h"
#include "model/chat_template/lexer.h"
#include "model/chat_template/parser.h"

namespace tandem {

absl::StatusOr<std::shared_ptr<const ChatTemplate>> ChatTemplate::Parse(absl::string_view source) {
  auto tmpl = std::shared_ptr<ChatTemplate>(new ChatTemplate());
  tmpl->source_ = std::string(source);
  absl::StatusOr<std::vector<jinja::Token>> tokens = jinja::Tokenize(source);
  if (!tokens.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("chat template: ", tokens.status().message()));
  }
  absl::StatusOr<jinja::Body> body = jinja::Parse(*std::move(tokens));
  if (!body.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("chat template: ", body.status().message()));
  }
  if (absl::Status st = jinja::Validate(*body); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("chat template: ", st.message()));
  }
  tmpl->body_ = *std::move(body);
  return std::shared_ptr<const ChatTemplate>(std::move(tmpl));
}

absl::StatusOr<std::string> ChatTemplate::Render(const jinja::Map& variables, const std::tm& now,
                                                 const jinja::RenderLimits& limits) const {
  absl::StatusOr<std::string> out = jinja::Interpret(body_, variables, now, limits);
  if (out.ok() || IsRaisedByTemplate(out.status())) return out;
  return absl::InvalidArgumentError(absl::StrCat("chat template ", out.status().message()));
}

absl::StatusOr<std::string> ChatTemplate::Render(const jinja::Map& variables) const {
  const std::time_t t = std::time(nullptr);
  std::tm now{};
  localtime_r(&t, &now);
  return Render(variables, now);
}

bool IsRaisedByTemplate(const absl::Status& status) {
  return status.GetPayload(jinja::kRaisedPayload).has_value();
}

}  // namespace tandem
