#include "client/cli_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

using testing::ElementsAre;

TEST(ParseTokenIdsTest, ListsAndErrors) {
  EXPECT_THAT(*ParseTokenIds("1, 2,3"), ElementsAre(1, 2, 3));
  const absl::StatusOr<std::vector<int32_t>> bad = ParseTokenIds("1,x,3");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "--prompt_ids: 'x' is not an integer token id");
  EXPECT_EQ(ParseTokenIds("1,,2").status().message(),
            "--prompt_ids: '' is not an integer token id");
}

TEST(BuildGenerateRequestTest, EachPromptForm) {
  GenerateArgs args;
  args.prompt = "hello";
  args.max_tokens = 7;
  args.temperature = 0.8f;
  args.top_k = 40;
  args.top_p = 0.9f;
  args.seed = 3;
  v1::GenerateRequest r = *BuildGenerateRequest(args);
  EXPECT_EQ(r.text(), "hello");
  EXPECT_EQ(r.max_tokens(), 7);
  EXPECT_EQ(r.sampling().temperature(), 0.8f);
  EXPECT_EQ(r.sampling().top_k(), 40);
  EXPECT_EQ(r.sampling().top_p(), 0.9f);
  EXPECT_EQ(r.sampling().seed(), 3u);

  args = GenerateArgs();
  args.prompt_ids = "4,5";
  r = *BuildGenerateRequest(args);
  EXPECT_THAT(r.token_ids().ids(), ElementsAre(4, 5));

  args = GenerateArgs();
  args.chat = "hi";
  args.system = "be brief";
  r = *BuildGenerateRequest(args);
  ASSERT_EQ(r.chat().messages_size(), 2);
  EXPECT_EQ(r.chat().messages(0).role(), "system");
  EXPECT_EQ(r.chat().messages(0).content(), "be brief");
  EXPECT_EQ(r.chat().messages(1).role(), "user");
  EXPECT_EQ(r.chat().messages(1).content(), "hi");
}

TEST(BuildGenerateRequestTest, RejectsAmbiguousArguments) {
  GenerateArgs none;
  EXPECT_EQ(BuildGenerateRequest(none).status().message(),
            "give exactly one of --prompt, --prompt_ids, --chat");
  GenerateArgs two;
  two.prompt = "a";
  two.chat = "b";
  EXPECT_EQ(BuildGenerateRequest(two).status().code(), absl::StatusCode::kInvalidArgument);
  GenerateArgs system;
  system.prompt = "a";
  system.system = "s";
  EXPECT_EQ(BuildGenerateRequest(system).status().message(), "--system needs --chat");
  GenerateArgs ids;
  ids.prompt_ids = "1;2";
  EXPECT_EQ(BuildGenerateRequest(ids).status().message(),
            "--prompt_ids: '1;2' is not an integer token id");
}

TEST(FormatErrorLineTest, CodeNameAndMessage) {
  EXPECT_EQ(FormatErrorLine(absl::UnavailableError("no healthy decode node")),
            "error: UNAVAILABLE: no healthy decode node");
  EXPECT_EQ(FormatErrorLine(absl::InvalidArgumentError("max_tokens must be >= 1 (got 0)")),
            "error: INVALID_ARGUMENT: max_tokens must be >= 1 (got 0)");
}

TEST(FormatStatsTest, DecodeRateCountsTokensAfterTheFirst) {
  GenerateStats s;
  s.tokens = 11;
  s.ttft = absl::Milliseconds(12.5);
  s.total = absl::Milliseconds(512.5);  // 10 tokens in 0.5 s
  s.finish_reason = "length";
  s.retries = 1;
  EXPECT_EQ(FormatStats(s), "tokens=11 ttft_ms=12.5 tokens_per_s=20.0 finish=length retries=1");
  s.tokens = 1;
  EXPECT_EQ(FormatStats(s), "tokens=1 ttft_ms=12.5 tokens_per_s=0.0 finish=length retries=1");
}

TEST(FormatStatusTableTest, AlignedRowsPerNode) {
  v1::ClusterStatusResponse c;
  c.set_model("smol");
  v1::NodeStatus* p = c.add_nodes();
  p->set_address("10.0.0.1:7001");
  p->set_role(v1::INSTANCE_ROLE_PREFILL);
  p->set_healthy(true);
  v1::ParallelConfig* layout = p->mutable_status()->mutable_layout()->mutable_parallel();
  layout->set_tp(2);
  layout->set_pcp(2);
  layout->set_dcp(4);
  layout->set_block_size(16);
  layout->set_interleave(1);
  v1::InstanceLoad* load = p->mutable_status()->mutable_load();
  load->set_running(3);
  load->set_queued(12);
  load->set_free_blocks(100);
  load->set_total_blocks(1024);
  load->set_leases(2);
  v1::NodeStatus* d = c.add_nodes();
  d->set_address("d:1");
  d->set_role(v1::INSTANCE_ROLE_DECODE);
  d->set_last_error("UNAVAILABLE: connection refused");
  // Polled once, then died: the router keeps its layout but sends no (stale) load.
  v1::NodeStatus* dead = c.add_nodes();
  dead->set_address("d:2");
  dead->set_role(v1::INSTANCE_ROLE_DECODE);
  v1::ParallelConfig* dead_layout = dead->mutable_status()->mutable_layout()->mutable_parallel();
  dead_layout->set_tp(1);
  dead_layout->set_pcp(1);
  dead_layout->set_dcp(1);
  dead_layout->set_block_size(16);
  dead_layout->set_interleave(1);
  dead->set_last_error("UNAVAILABLE: gone");
  EXPECT_EQ(FormatStatusTable(c),
            "model: smol\n"
            "ROLE     ADDRESS        HEALTHY  LAYOUT(tp/pcp/dcp/B/I)  RUNNING  QUEUED  "
            "BLOCKS(free/total)  LEASES  ERROR\n"
            "prefill  10.0.0.1:7001  yes      2/2/4/16/1              3        12      "
            "100/1024            2\n"
            "decode   d:1            no       -                       -        -       "
            "-                   -       UNAVAILABLE: connection refused\n"
            "decode   d:2            no       1/1/1/16/1              -        -       "
            "-                   -       UNAVAILABLE: gone\n");
}

}  // namespace
}  // namespace tandem
