// `kjit remote ...` and `kjit precompile --remote --shard i/N` against a real redis-server on a
// unix socket: keygen, push/pull/ls/verify/prune/stats with --json, and N sharded builders that
// cover a set exactly once.
#include "tests/cli/process.hpp"
#include "tests/remote/redis_server.hpp"

#include "cache/tune_table.hpp"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <set>

#include <sys/stat.h>

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

TEST_F(RemoteCli, PullRefusesAManifestThatIsNoFileWithOneLine) {
  // A FIFO drew open_regular's warning and then the refused read's errno; now one error, exit 2.
  const fs::path fifo = dir_ / "manifest.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  const ProcessResult r = kjit("s", {"remote", "pull", "--manifest", fifo.string()});
  EXPECT_EQ(r.code, 2) << r.describe();
  EXPECT_EQ(r.err_lines(), std::vector<std::string>{"kjit: error: manifest " + fifo.string() +
                                                    " is not a regular file (a FIFO, socket or device)"})
      << r.describe();
}

kjit::cache::TuneTable tune_table(int64_t bucket, int64_t tuned_unix) {
  kjit::cache::TuneTable t;
  t.fingerprint_id = "f1eet0000001";
  t.fingerprint_text = "name=Test GPU;cc=9.0";
  kjit::cache::TuneEntry e;
  e.op = "decode";
  e.bucket = {bucket};
  e.shape = "batch=" + std::to_string(bucket);
  e.winner = {"attention.decode", "head_dim=128 rows=8", {{"splits", bucket}}, 10, 12, 0.01, 128, 4096, 96, 1};
  e.default_choice = e.winner;
  e.tuned_unix = tuned_unix;
  t.entries.push_back(e);
  return t;
}

TEST_F(RemoteCli, TuningTablesAreSharedAndMerged) {
  const std::string prefix = (dir_ / "fleet").string();
  kjit_json("any", {"remote", "keygen", prefix});
  const std::map<std::string, std::string> builder = {{"KJIT_REMOTE_SIGNING_KEY", prefix + ".key"},
                                                      {"KJIT_REMOTE_TRUSTED_KEYS", prefix + ".pub"}};
  const std::map<std::string, std::string> server = {{"KJIT_REMOTE_MODE", "ro"},
                                                     {"KJIT_REMOTE_TRUSTED_KEYS", prefix + ".pub"}};
  // Two builders tuned two buckets of one kind of device; both push, nothing is lost.
  kjit::cache::publish_table((dir_ / "hosts" / "b1").string(), tune_table(1, 100));
  kjit::cache::publish_table((dir_ / "hosts" / "b2").string(), tune_table(2, 200));
  EXPECT_EQ(kjit_json("b1", {"remote", "push"}, builder)["tuning_tables"], 1);
  EXPECT_EQ(kjit_json("b2", {"remote", "push"}, builder)["tuning_tables"], 1);
  // A serving host with its own older measurement of bucket 2 merges the fleet's on pull.
  kjit::cache::TuneTable own = tune_table(2, 50);
  own.entries[0].winner.us = 99;
  kjit::cache::publish_table((dir_ / "hosts" / "s").string(), own);
  EXPECT_EQ(kjit_json("s", {"remote", "pull"}, server)["tuning_tables"], 1);
  kjit::cache::TuneTable merged;
  ASSERT_TRUE(kjit::cache::read_table(kjit::cache::table_path((dir_ / "hosts" / "s").string(), "f1eet0000001"), &merged));
  ASSERT_EQ(merged.entries.size(), 2u);
  EXPECT_EQ(merged.entries[1].tuned_unix, 200) << "the newer measurement won";
  EXPECT_EQ(merged.entries[1].winner.us, 10);
  // An unsigned table (pushed by a host without the key, trusting nothing) is not merged by
  // hosts that require signatures.
  ASSERT_TRUE(redis_->client().command({"FLUSHALL"}));
  kjit::cache::publish_table((dir_ / "hosts" / "u").string(), tune_table(3, 300));
  EXPECT_EQ(kjit_json("u", {"remote", "push"})["tuning_tables"], 1);
  const ProcessResult pull = kjit("s2", {"remote", "pull", "--json"}, server);
  EXPECT_EQ(json::parse(pull.out, nullptr, false)["tuning_tables"], 0) << pull.describe();
  EXPECT_NE(pull.err.find("tuning table of fingerprint f1eet0000001 was rejected (unsigned"), std::string::npos)
      << pull.describe();
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
  for (const char* bad : {"3/3", "0/18446744073709551616", "+1/4", "0/4 ", "a/b"}) {
    EXPECT_EQ(kjit("x", {"precompile", "--remote", "--shard", bad}).code, 2) << bad;
  }
  EXPECT_EQ(kjit("x", {"precompile", "--shard", "0/3"}).code, 2) << "--shard without --remote";
  // A malformed share is named before what it lacks.
  const ProcessResult malformed = kjit("x", {"precompile", "--shard", "abc"});
  EXPECT_EQ(malformed.code, 2);
  EXPECT_NE(malformed.err.find("--shard 'abc' is not i/N"), std::string::npos) << malformed.describe();
  EXPECT_EQ(kjit("x", {"remote", "stats"}, {{"KJIT_REMOTE", ""}}).code, 2);
}

}  // namespace
