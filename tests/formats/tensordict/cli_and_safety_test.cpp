// `trove pack / unpack / refresh-checksums` through CLI11, and crash safety of the writers.
#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "formats/tensordict/tensordict_reader.h"
#include "td_fixtures.h"

namespace trove::tdtest {
namespace {

class TensordictCliTest : public TdTest {
 protected:
  int RunCli(const std::string& args) {
    CLI::App app("trove");
    int code = -1;
    cli::AddTensordictCommands(app, &code);
    app.require_subcommand(1);
    app.parse(args, false);
    return code;
  }
  void MakeDir() {
    Write("d/meta.json",
          R"({"a":{"device":"cpu","shape":[4],"dtype":"torch.float32","is_nested":false},"shape":[],"device":"cpu","_type":"<class 'tensordict._td.TensorDict'>"})");
    WriteArray<float>("d/a.memmap", {1, 2, 3, 4});
  }
};

TEST_F(TensordictCliTest, PackUnpackRefresh) {
  MakeDir();
  EXPECT_EQ(RunCli("pack " + P("d") + " " + P("x.tdz") + " --compression bzip2"), cli::kExitOk);
  EXPECT_EQ(ReadTdz(MappedFile::Open(P("x.tdz")), {}).tensors.size(), 1u);
  EXPECT_EQ(RunCli("unpack " + P("x.tdz") + " " + P("u")), cli::kExitOk);
  EXPECT_EQ(Slurp(P("u/a.memmap")), Slurp(P("d/a.memmap")));
  EXPECT_EQ(RunCli("pack " + P("d") + " " + P("s.tdz")), cli::kExitOk);
  const float v = 9;
  WriteTdzLeafInPlace(P("s.tdz"), "a", 4, &v, 4);
  EXPECT_EQ(RunCli("refresh-checksums " + P("s.tdz")), cli::kExitOk);
  EXPECT_TRUE(CheckTdzChecksums(P("s.tdz")).empty());
  EXPECT_THROW(RunCli("pack " + P("d") + " " + P("y.tdz") + " --compression zstd"), CLI::ValidationError);
  ExpectError([&] { RunCli("unpack " + P("missing.tdz") + " " + P("v")); }, ErrorCode::kNotFound, "missing.tdz");
}

TEST_F(TensordictCliTest, FailedWritesLeaveTheOldDestinationIntact) {
  MakeDir();
  WriteTdz(ReadTensordictDir(P("d"), {}), P("keep.tdz"));
  WriteTensordictDir(ReadTensordictDir(P("d"), {}), P("keepdir"));
  const std::string before = Slurp(P("keep.tdz"));
  Document bad;
  bad.root = bad.arena->Dict();
  Put(*bad.arena, bad.root, "shape", bad.arena->Tensor(MakeTensorOf<float>(DType::kFloat32, {1}, {1})));
  EXPECT_THROW(WriteTdz(bad, P("keep.tdz")), Error);
  EXPECT_THROW(WriteTensordictDir(bad, P("keepdir")), Error);
  EXPECT_EQ(Slurp(P("keep.tdz")), before);
  EXPECT_TRUE(fs::exists(P("keepdir/a.memmap")));
  // A leaf whose bytes cannot be streamed fails mid-write: still nothing replaced, no debris.
  Document broken;
  broken.root = broken.arena->Dict();
  TensorView meta_only = MakeTensor(DType::kFloat32, {2}, {});
  meta_only.has_data = false;
  Put(*broken.arena, broken.root, "m", broken.arena->Tensor(meta_only));
  EXPECT_THROW(WriteTdz(broken, P("keep.tdz")), Error);
  EXPECT_EQ(Slurp(P("keep.tdz")), before);
  size_t hidden = 0;
  for (auto& e : fs::directory_iterator(root_)) hidden += e.path().filename().string()[0] == '.';
  EXPECT_EQ(hidden, 0u);
}

}  // namespace
}  // namespace trove::tdtest
