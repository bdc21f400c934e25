// tandem-fuzz-seeds OUT_DIR: writes the seed corpus of every fuzz target (OUT_DIR/<target>/...)
// from the project's own writers, so the seeds are what Tandem really reads and writes: GGUF
// images from GgufWriter and the synthetic model generator, safetensors files, tokenizer.json
// and config.json texts, serialized GenerateRequests, OpenAI bodies, transfer metadata and KV
// handles. tests/fuzz/corpus/ holds its output (regenerate with this tool when a format
// changes); files whose name starts with "regress-" are inputs of past findings, added by hand.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kv_transfer/ucx/metadata_proto.h"
#include "model/format/gguf_writer.h"
#include "model/format/half.h"
#include "model/tools/synthetic_model.h"
#include "proto/convert/kv_layout_proto.h"
#include "tandem/v1/common.pb.h"
#include "tandem/v1/router.pb.h"
#include "tests/fuzz/fuzz_model.h"

namespace tandem {
namespace {

std::filesystem::path g_out;
int g_written = 0;

void Write(const std::string& target, const std::string& name, const std::string& bytes) {
  const std::filesystem::path dir = g_out / target;
  std::filesystem::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary) << bytes;
  ++g_written;
}

[[noreturn]] void Die(const absl::Status& s, const char* what) {
  std::fprintf(stderr, "tandem-fuzz-seeds: %s: %s\n", what, s.ToString().c_str());
  std::exit(1);
}

void GgufSeeds() {
  Write("gguf", "tokenizer-only.gguf", fuzz::TokenizerGgufImage());
  for (const auto& [name, dtype, tied] : {std::tuple{"tiny-f16-tied.gguf", GgmlType::kF16, true},
                                          std::tuple{"tiny-q8_0.gguf", GgmlType::kQ8_0, false}}) {
    SyntheticModelOptions o;
    o.layers = 1;
    o.hidden = 32;
    o.q_heads = 2;
    o.kv_heads = 1;
    o.head_dim = 16;
    o.intermediate = 32;
    o.vocab = 260;
    o.context = 64;
    o.dtype = dtype;
    o.tied_embeddings = tied;
    absl::StatusOr<GgufWriter> writer = BuildSyntheticModel(o);
    if (!writer.ok()) Die(writer.status(), "BuildSyntheticModel");
    Write("gguf", name, writer->Serialize());
  }
  // One small tensor of every type Tandem dequantises (random-looking but valid block bytes).
  GgufWriter types(/*version=*/2, /*alignment=*/64);
  types.Set("general.architecture", GgufValue::String("llama"));
  uint32_t state = 12345;
  for (GgmlType t : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ4_0,
                     GgmlType::kQ4_1, GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ6_K}) {
    const GgmlTypeInfo& info = GgmlTypeTraits(t);
    if (!info.dequantizable) continue;
    const int64_t numel = 256;
    absl::StatusOr<int64_t> bytes = GgmlByteSize(t, numel);
    if (!bytes.ok()) Die(bytes.status(), "GgmlByteSize");
    std::string data(static_cast<size_t>(*bytes), '\0');
    for (size_t i = 0; i < data.size(); ++i) {
      state = state * 1103515245u + 12345u;
      // Small values keep f16/bf16 scales finite.
      data[i] = static_cast<char>((i % 2 == 1) ? (state >> 16) & 0x3b : (state >> 16) & 0xff);
    }
    if (absl::Status s = types.AddTensor(absl::StrCat("t.", info.name), {1, numel}, t, data);
        !s.ok()) {
      Die(s, "AddTensor");
    }
  }
  Write("gguf", "every-type-v2.gguf", types.Serialize());
}

void GgufTokenizerSeeds() {
  Write("gguf_tokenizer", "synthetic-smollm.gguf", fuzz::TokenizerGgufImage());
  GgufWriter w;
  w.Set("general.name", GgufValue::String("mini"));
  w.Set("llama.context_length", GgufValue::Uint32(32));
  w.Set("tokenizer.ggml.model", GgufValue::String("gpt2"));
  w.Set("tokenizer.ggml.pre", GgufValue::String("llama-bpe"));
  w.Set("tokenizer.ggml.tokens",
        GgufValue::StringArray({"<|begin_of_text|>", "<|eot_id|>", "h", "e", "l", "o", "Ġ", "w",
                                "r", "d", "he", "ll", "hell", "hello", "1", "2"}));
  w.Set("tokenizer.ggml.token_type",
        GgufValue::Int32Array({3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}));
  w.Set("tokenizer.ggml.merges", GgufValue::StringArray({"h e", "l l", "he ll", "hell o"}));
  w.Set("tokenizer.ggml.bos_token_id", GgufValue::Uint32(0));
  w.Set("tokenizer.ggml.eos_token_id", GgufValue::Uint32(1));
  w.Set("tokenizer.ggml.add_bos_token", GgufValue::Bool(true));
  Write("gguf_tokenizer", "mini-llama3.gguf", w.Serialize());
  w.Set("tokenizer.ggml.pre", GgufValue::String("qwen2"));
  Write("gguf_tokenizer", "mini-qwen2.gguf", w.Serialize());
  Write("gguf_tokenizer", "mini-spm-phi3.gguf", fuzz::SpmTokenizerGgufImage());
}

std::string SafetensorsImage(const std::string& header, const std::string& data) {
  std::string out;
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return out + header + data;
}

void SafetensorsSeeds() {
  std::string data;
  for (float f : {1.0f, -2.0f, 0.5f, 3.25f, 0.f, -0.125f}) {
    data.append(reinterpret_cast<const char*>(&f), sizeof f);
  }
  for (float f : {1.0f, -2.0f, 0.5f, 65504.f}) {
    const uint16_t h = F32ToF16(f);
    data.append(reinterpret_cast<const char*>(&h), sizeof h);
  }
  for (float f : {1.0f, -2.0f}) {
    const uint16_t b = F32ToBf16(f);
    data.append(reinterpret_cast<const char*>(&b), sizeof b);
  }
  const std::string header =
      R"({"__metadata__":{"format":"pt"},)"
      R"("model.norm.weight":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
      R"("lm_head.weight":{"dtype":"F16","shape":[4],"data_offsets":[24,32]},)"
      R"("model.embed_tokens.weight":{"dtype":"BF16","shape":[1,2],"data_offsets":[32,36]}})";
  Write("safetensors", "three-dtypes.safetensors", SafetensorsImage(header, data));
  Write("safetensors", "int64.safetensors",
        SafetensorsImage(R"({"ids":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})",
                         std::string(8, '\x01')));
  Write("safetensors", "empty.safetensors", SafetensorsImage("{}", ""));
}

void HfTokenizerSeeds() {
  const std::string vocab =
      R"("vocab": {"<|endoftext|>": 0, "<|im_start|>": 1, "<|im_end|>": 2, "h": 3, "e": 4,)"
      R"( "l": 5, "o": 6, "Ġ": 7, "w": 8, "r": 9, "d": 10, "1": 11, "2": 12, "he": 13, "ll": 14,)"
      R"( "llo": 15, "hello": 16, "Ġw": 17, "or": 18, "Ġwor": 19, "ld": 20, "Ġworld": 21})";
  const std::string merges =
      R"("merges": ["h e", "l l", "ll o", "he llo", ["Ġ", "w"], ["o", "r"], ["Ġw", "or"], "l d",)"
      R"( "Ġwor ld"])";
  const std::string added =
      R"("added_tokens": [{"id": 0, "content": "<|endoftext|>", "special": true},)"
      R"( {"id": 1, "content": "<|im_start|>", "special": true},)"
      R"( {"id": 2, "content": "<|im_end|>", "special": true}],)";
  const std::string pre_tokenizers[] = {
      R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": true})",
      R"({"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": true},)"
      R"( {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}]})",
      R"({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": )"
      R"("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| )"
      R"(?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated",)"
      R"( "invert": false}, {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]})"};
  const char* names[] = {"bytelevel.json", "digits-bytelevel.json", "llama3-split.json"};
  for (int i = 0; i < 3; ++i) {
    Write("hf_tokenizer", names[i],
          absl::StrCat(R"({"version": "1.0", )", added, R"( "normalizer": null, "pre_tokenizer": )",
                       pre_tokenizers[i],
                       R"(, "decoder": {"type": "ByteLevel"}, "model": {"type": "BPE", )",
                       R"("byte_fallback": false, )", vocab, ", ", merges, "}}"));
  }
  Write("hf_tokenizer", "config.json",
        R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,)"
        R"( "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,)"
        R"( "num_key_value_heads": 2, "max_position_embeddings": 2048, "rms_norm_eps": 1e-05,)"
        R"( "rope_theta": 10000.0, "vocab_size": 22, "tie_word_embeddings": true,)"
        R"( "bos_token_id": 1, "eos_token_id": [2, 0], "torch_dtype": "bfloat16"})");
}

void TokenizeSeeds() {
  Write("tokenize", "english.txt", "Hello world, this is a test of the tokenizer. 12345 tokens!");
  Write("tokenize", "chatml.txt",
        "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n"
        "<|im_start|>assistant\n");
  Write("tokenize", "unicode.txt",
        "Grüße, café — 你好，世界 😀 \xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x92\xbb tab\there\r\n");
  Write("tokenize", "invalid-utf8.txt", std::string("ok \xff\xfe \xc3 broken \xe4\xbd end"));
  std::string with_ids = std::string("decode these") + '\0';
  for (int32_t id : {1, 72 + 3, 2, 300, -5, 319, 320, 0}) {
    with_ids.append(reinterpret_cast<const char*>(&id), sizeof id);
  }
  Write("tokenize", "text-and-ids.bin", with_ids);
}

// Templates with the constructs real chat templates use; a user message after the NUL.
void ChatTemplateSeeds() {
  Write("chat_template", "chatml-default-system.jinja",
        std::string("{% for message in messages %}{% if loop.first and messages[0]['role'] != "
                    "'system' %}{{ '<|im_start|>system\nYou are helpful.<|im_end|>\n' }}{% endif "
                    "%}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
                    "'<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ "
                    "'<|im_start|>assistant\n' }}{% endif %}") +
            '\0' + "Caf\xc3\xa9 <|im_end|> {{ 1 }}");
  Write("chat_template", "tools-namespace.jinja",
        "{{- bos_token }}\n{%- set ns = namespace(system='', n=0) %}\n{%- for m in messages %}\n"
        "  {%- if m.role == 'system' %}{%- set ns.system = m.content | trim %}{%- continue %}"
        "{%- endif %}\n  {%- set ns.n = ns.n + 1 %}\n  {{- '[' ~ m.role | upper ~ '] ' ~ "
        "m.content ~ eos_token }}\n{%- endfor %}\n{%- if tools is not none %}\n  {%- for t in "
        "tools %}{{ t | tojson(indent=2) }}{% endfor %}\n{%- endif %}\n{{ ns.system }} "
        "{{ ns.n }}");
  Write("chat_template", "macros-filters.jinja",
        "{% macro render(m, prefix='> ') %}{{ prefix }}{{ m.content[:20] | replace('\\n', ' ') "
        "}}{% endmacro %}{% for m in messages | selectattr('role', 'equalto', 'user') %}{{ "
        "render(m) }}{% if not loop.last %}\n{% endif %}{% endfor %}{{ messages | map(attribute="
        "'role') | join(',') }}{{ '%s/%d' % ('a', 2) }}{{ '{}:{}'.format(1, none) }}"
        "{% if messages[0].content is string and 'x' not in messages[0].content %}!{% endif %}");
  Write("chat_template", "raise.jinja",
        "{% if messages[1]['role'] != 'user' %}{{ raise_exception('roles must alternate') }}"
        "{% endif %}{{ strftime_now('%d %b %Y') }}{{ range(3) | list }}{{ {'b': 1, 'a': [1.5]} "
        "| dictsort }}");
}

// The grammar front ends: a first byte picks GBNF (0), JSON Schema (1) or regex (2).
std::string Mode(char m) { return std::string(1, m); }

void GrammarSeeds() {
  Write("grammar", "gbnf-ambiguous.txt",
        Mode(0) + R"(root ::= (("a" | "ab")? "b"*){0,5} [^\x00-\x7F]
)");
  Write("grammar", "gbnf-object.txt", Mode(0) + R"(root ::= "{" ws ("\"" [a-z]+ "\":" ws value)? "}"
value ::= [0-9]+ | "true" | "[" value* "]"
ws ::= [ \t\n]{0,3}
)");
  Write("grammar", "regex-classes.txt", Mode(2) + R"([a-c]{2,4}(x|yz)*\d+\.?[^"]?é)");
  Write("grammar", "regex-groups.txt", Mode(2) + R"((?:ab|a)+(bc)?\w{0,3}$)");
  Write(
      "grammar", "schema-anyof.json",
      Mode(1) +
          R"({"anyOf":[{"type":"string","pattern":"^a[0-9]{2}$"},{"type":"null"},{"oneOf":[{"type":"boolean"},{"type":"number"}]}],"$defs":{"x":{"const":"y"}}})");
  Write(
      "grammar", "schema-object.json",
      Mode(1) +
          R"({"type":"object","properties":{"name":{"type":"string","maxLength":5},"n":{"type":"integer","minimum":-3,"maximum":40},"t":{"type":"array","items":{"enum":["a",1,null]},"maxItems":2},"r":{"$ref":"#"}},"required":["name"],"additionalProperties":{"type":"boolean"}})");
}

void RequestSeeds() {
  v1::GenerateRequest text;
  text.set_text("Tell me a story about a <|im_start|> token.");
  text.set_max_tokens(16);
  text.mutable_sampling()->set_temperature(0.7f);
  text.mutable_sampling()->set_top_p(0.9f);
  text.mutable_sampling()->set_top_k(40);
  text.mutable_sampling()->set_seed(7);
  Write("request", "text.pb", text.SerializeAsString());

  v1::GenerateRequest ids;
  ids.set_model(fuzz::kFuzzModelName);
  for (int32_t id : {1, 75, 104, 101, 2}) ids.mutable_token_ids()->add_ids(id);
  ids.set_max_tokens(200);
  ids.set_ignore_eos(true);
  ids.set_request_id("req-1");
  Write("request", "token-ids.pb", ids.SerializeAsString());

  v1::GenerateRequest chat;
  for (const auto& [role, content] :
       {std::pair{"system", "Be brief."}, std::pair{"user", "What is 2+2?"},
        std::pair{"assistant", "4"}, std::pair{"user", "And 3+3?"}}) {
    v1::ChatMessage* m = chat.mutable_chat()->add_messages();
    m->set_role(role);
    m->set_content(content);
  }
  chat.set_max_tokens(8);
  Write("request", "chat.pb", chat.SerializeAsString());

  v1::GenerateRequest bad = ids;
  bad.set_model("other-model");
  bad.mutable_token_ids()->add_ids(100000);
  bad.set_max_tokens(-3);
  bad.mutable_sampling()->set_top_p(0.f);
  Write("request", "invalid.pb", bad.SerializeAsString());
}

void OpenAiSeeds() {
  // The first byte picks the endpoint: '0' chat completions, '1' completions.
  Write("openai", "chat.json",
        R"(0{"model": "fuzz-model", "messages": [{"role": "system", "content": "Be brief."},)"
        R"( {"role": "user", "content": "Hello!"}], "max_tokens": 16, "temperature": 0.7,)"
        R"( "top_p": 0.9, "stream": true, "stream_options": {"include_usage": true}})");
  Write("openai", "chat-parts.json",
        R"(0{"messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"},)"
        R"( {"type": "text", "text": " there"}]}, {"role": "assistant", "content": null}],)"
        R"( "max_completion_tokens": 4, "stop": ["\n", "END"], "seed": 42, "n": 1, "user": "u"})");
  Write("openai", "completion.json",
        R"(1{"model": "fuzz-model", "prompt": "Once upon a time", "max_tokens": 32,)"
        R"( "top_k": -1, "ignore_eos": true, "stop": "."})");
  Write("openai", "completion-ids.json", R"(1{"prompt": [[1, 75, 104, 2]], "max_tokens": 2})");
  Write("openai", "rejected.json",
        R"(1{"prompt": ["a", "b"], "logprobs": 2, "echo": true, "best_of": 3,)"
        R"( "frequency_penalty": 0.5, "n": 2, "temperature": -1})");
}

TransferMetadata Metadata(ParallelConfig parallel, ModelDims dims) {
  TransferMetadata m;
  m.engine_id = "prefill-7";
  m.epoch = 42;
  m.compat_hash = 0x1234567890abcdefull;
  m.layout = KvLayout{parallel, dims, KvDType::kBF16};
  for (int r = 0; r < m.layout.world(); ++r) {
    const std::string rkey = {'\x01', 0, 0, 0, 0, 0, 0, 0, 0, 2, static_cast<char>(r), 'k'};
    m.ranks.push_back(RankTransferInfo{absl::StrCat("worker-address-", r),
                                       0x7f0000000000ull + r * 0x100000ull, 1 << 20, rkey});
  }
  return m;
}

void TransferSeeds() {
  const TransferMetadata tp4 = Metadata(ParallelConfig{4, 2, 2, 16, 4}, ModelDims{3, 8, 2, 64});
  const TransferMetadata tp1 = Metadata(ParallelConfig{1, 1, 1, 16, 1}, ModelDims{2, 4, 4, 16});
  Write("transfer_metadata", "tp4-pcp2-dcp2.pb", SerializeTransferMetadata(tp4));
  Write("transfer_metadata", "tp1.pb", SerializeTransferMetadata(tp1));
  for (const auto& [name, m] : {std::pair{"tp4-pcp2-dcp2.pb", tp4}, std::pair{"tp1.pb", tp1}}) {
    v1::KvHandle h;
    h.set_engine_id(m.engine_id);
    h.set_epoch(m.epoch);
    h.set_request_id("req-1");
    for (int32_t b : {0, 3, 4, 9}) h.add_block_table(b);
    h.set_num_tokens(57);
    *h.mutable_layout() = ToProto(m.layout);
    h.set_lease_expiry_unix_ms(1764560000000);
    h.set_generation(5);
    h.set_prefill_address("10.0.0.2:50051");
    Write("kv_layout", name, h.SerializeAsString());
  }
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: tandem-fuzz-seeds OUT_DIR\n");
    return 2;
  }
  tandem::g_out = argv[1];
  tandem::GgufSeeds();
  tandem::GgufTokenizerSeeds();
  tandem::SafetensorsSeeds();
  tandem::HfTokenizerSeeds();
  tandem::TokenizeSeeds();
  tandem::ChatTemplateSeeds();
  tandem::GrammarSeeds();
  tandem::RequestSeeds();
  tandem::OpenAiSeeds();
  tandem::TransferSeeds();
  std::printf("tandem-fuzz-seeds: wrote %d files under %s\n", tandem::g_written, argv[1]);
  return 0;
}
