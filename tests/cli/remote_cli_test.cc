// `kjit remote ...` and `kjit precompile --remote --shard i/N` against a real redis-server on a
// unix socket: keygen, push/pull/ls/verify/prune/stats with --json, and N sharded builders that
// cover a set exactly once.
#include "tests/cli/process.hpp"
#include "tests/remote/redis_server.hpp"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <set>

namespace {

using kjit::test::build_dir;
using kjit::test::fresh_dir;
using kjit::test::ProcessResult;
using kjit::test::run_process;
using nlohmann::json;
namespace fs = std::filesystem;

fs::path kjit_binary() { return build_dir() / "tools" / "kjit"; }

class RemoteCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(kjit_binary())) << "build the kjit_cli target";
    dir_ = fresh_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    redis_ = std::make_unique<kjit::test::RedisServer>(dir_ / "redis");
  }
  void TearDown() override { redis_.reset(); }

  ProcessResult kjit(const std::string& host, std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
    args.insert(args.begin(), kjit_binary().string());
    env.emplace("KJIT_CACHE_DIR", (dir_ / "hosts" / host).string());
    env.emplace("KJIT_REMOTE", redis_->url());
    env.emplace("KJIT_REMOTE_TIMEOUT_MS", "2000");
    return run_process(args, env, dir_ / "scratch");
  }
  json kjit_json(const std::string& host, std::vector<std::string> args, std::map<std::string, std::string> env = {},
                 int code = 0) {
    args.push_back("--json");
    ProcessResult r = kjit(host, args, env);
    EXPECT_EQ(r.code, code) << r.describe();
    return json::parse(r.out, nullptr, false);
  }

  fs::path dir_;
  std::unique_ptr<kjit::test::RedisServer> redis_;
};

TEST_F(RemoteCli, KeygenPushPullVerifyPrune) {
  const std::string prefix = (dir_ / "fleet").string();
  const json keys = kjit_json("any", {"remote", "keygen", prefix});
  EXPECT_EQ(keys["secret_key_file"], prefix + ".key");
  EXPECT_EQ(fs::status(prefix + ".key").permissions() & fs::perms::group_all, fs::perms::none);
  EXPECT_EQ(kjit("any", {"remote", "keygen", prefix}).code, 2) << "never overwrites a key";
  const std::map<std::string, std::string> builder = {{"KJIT_REMOTE_SIGNING_KEY", prefix + ".key"},
                                                      {"KJIT_REMOTE_TRUSTED_KEYS", prefix + ".pub"}};
  const std::map<std::string, std::string> server = {{"KJIT_REMOTE_MODE", "ro"},
                                                     {"KJIT_REMOTE_TRUSTED_KEYS", prefix + ".pub"}};

  // A local compile (no remote), then pushed.
  ASSERT_EQ(kjit("b", {"compile", "rotary", "style=neox", "head_dim=64", "pos=i32", "--arch", "sm_89"},
                 {{"KJIT_REMOTE", ""}})
                .code,
            0);
  EXPECT_EQ(kjit("s", {"remote", "push"}, server).code, 2) << "a read-only host refuses to push";
  EXPECT_EQ(kjit_json("b", {"remote", "push"}, builder)["pushed"], 1);
  EXPECT_EQ(kjit_json("b", {"remote", "push"}, builder)["present"], 1);

  const json ls = kjit_json("s", {"remote", "ls"}, server);
  ASSERT_EQ(ls["entries"].size(), 1u);
  EXPECT_EQ(ls["entries"][0]["family"], "rotary");
  EXPECT_EQ(ls["entries"][0]["signer"], keys["key_id"]);
  EXPECT_GT(ls["entries"][0]["ttl_s"].get<int64_t>(), 0);
  EXPECT_EQ(kjit_json("s", {"remote", "stats"}, server)["entries"], 1);

  // A serving host pulls it, then compiles it from its disk without asking the tier.
  EXPECT_EQ(kjit_json("s", {"remote", "pull"}, server)["pulled"], 1);
  EXPECT_EQ(kjit_json("s", {"remote", "pull"}, server)["present"], 1);
  const json hit = kjit_json("s", {"compile", "rotary", "style=neox", "head_dim=64", "pos=i32", "--arch", "sm_89"},
                             {{"KJIT_REMOTE", ""}, {"KJIT_JIT", "off"}});
  EXPECT_EQ(hit["origin"], "disk") << hit.dump();

  // An entry forged with another key fails verify and is pruned by a read-write host.
  const std::string value_key = redis_->client().command({"KEYS", "*:v"})->elements.at(0).str;
  std::string forged = redis_->client().command({"GET", value_key})->str;
  forged[forged.size() - 1] ^= 1;  // the signature's last byte
  ASSERT_TRUE(redis_->client().command({"SET", value_key, forged}));
  const json verify = kjit_json("s", {"remote", "verify"}, server, 1);
  EXPECT_EQ(verify["bad"], 1);
  EXPECT_NE(verify["entries"][0]["problem"].get<std::string>().find("bad signature"), std::string::npos);
  EXPECT_EQ(kjit("s", {"remote", "prune"}, server).code, 2) << "read-only";
  EXPECT_EQ(kjit_json("b", {"remote", "prune"}, builder)["removed"], 1);
  EXPECT_EQ(redis_->keys(), 0);
}

TEST_F(RemoteCli, AFleetManifestRecordsWhatHostsUsedAndReplays) {
  // Two serving hosts (read-only) record into the fleet's manifest set; one specialization is
  // used by both and listed once.
  const std::map<std::string, std::string> serving = {{"KJIT_REMOTE_MODE", "ro"}, {"KJIT_RECORD", "remote:"}};
  ASSERT_EQ(kjit("s1", {"compile", "rotary", "style=neox", "head_dim=64", "pos=i32", "--arch", "sm_89"}, serving).code, 0);
  ASSERT_EQ(kjit("s2", {"compile", "rotary", "style=neox", "head_dim=64", "pos=i32", "--arch", "sm_89"}, serving).code, 0);
  ASSERT_EQ(kjit("s2", {"compile", "rotary", "style=gptj", "head_dim=64", "pos=i32", "--arch", "sm_89"}, serving).code, 0);
  EXPECT_EQ(redis_->keys(), 1) << "the manifest set is the only thing read-only hosts wrote";
  const std::string file = (dir_ / "fleet.jsonl").string();
  EXPECT_EQ(kjit_json("b", {"remote", "manifest", "-o", file})["lines"], 2);
  // A builder replays it.
  const json r = kjit_json("b", {"precompile", "--manifest", file});
  EXPECT_EQ(r["compiled"], 2) << r.dump();
  EXPECT_EQ(r["failed"], 0);
}

TEST_F(RemoteCli, ShardedBuildersCoverTheSetExactlyOnce) {
  const std::vector<std::string> set = {"precompile", "--family", "rotary", "--arch", "sm_89", "-j", "1"};
  // The whole set's keys, from one local run without the tier.
  std::set<std::string> all;
  const json whole = kjit_json("all", set, {{"KJIT_REMOTE", ""}});
  for (const json& item : whole["items"]) all.insert(item["key"].get<std::string>());
  ASSERT_GE(all.size(), 3u);
  std::multiset<std::string> covered;
  constexpr int kShards = 3;
  for (int i = 0; i < kShards; ++i) {
    std::vector<std::string> args = set;
    args.insert(args.end(), {"--remote", "--shard", std::to_string(i) + "/" + std::to_string(kShards)});
    const json r = kjit_json("builder" + std::to_string(i), args);
    EXPECT_EQ(r["in_remote"], r["items"].size());
    for (const json& item : r["items"]) covered.insert(item["key"].get<std::string>());
  }
  EXPECT_EQ(std::set<std::string>(covered.begin(), covered.end()), all);
  EXPECT_EQ(covered.size(), all.size()) << "no key built by two shards";
  EXPECT_EQ(kjit_json("x", {"remote", "stats"})["entries"], all.size());
  EXPECT_EQ(kjit("x", {"precompile", "--shard", "3/3"}).code, 2);
  EXPECT_EQ(kjit("x", {"remote", "stats"}, {{"KJIT_REMOTE", ""}}).code, 2);
}

}  // namespace
