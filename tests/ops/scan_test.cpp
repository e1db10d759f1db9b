// Scan: a clean torch file gives only info findings and allowed globals; a pickle naming
// os.system is a critical finding naming the global and its entry.
#include "ops_fixtures.h"
#include "trove/checks.h"

namespace trove::opstest {
namespace {

class ScanTest : public OpsTest {};

TEST_F(ScanTest, CleanTorchFileHasOnlyInfoFindings) {
  Torch("torch.save({'w': torch.ones(2, 2), 'step': 1}, ROOT + '/clean.pt')\n");
  CheckReport report = Scan(P("clean.pt"));
  EXPECT_EQ(report.format, "pt");
  for (const Finding& f : report.findings) EXPECT_EQ(f.severity, Severity::kInfo) << f.entry << ": " << f.message;
  ASSERT_FALSE(report.globals.empty());
  bool rebuild = false;
  for (const auto& g : report.globals) {
    EXPECT_TRUE(g.allowed) << g.name;
    EXPECT_EQ(g.entry, "clean/data.pkl") << g.name;
    rebuild |= g.name == "torch._utils._rebuild_tensor_v2";
  }
  EXPECT_TRUE(rebuild);

  // trove's own writer: the same.
  report = Scan(SamplePt());
  for (const Finding& f : report.findings) EXPECT_EQ(f.severity, Severity::kInfo) << f.entry << ": " << f.message;
}

TEST_F(ScanTest, OsSystemGlobalIsCriticalAndNamesTheEntry) {
  // A torch-shaped zip whose data.pkl calls os.system (protocol 0: GLOBAL at offset 0).
  Torch("payload = b\"cos\\nsystem\\n(S'echo owned'\\ntR.\"\n"
        "with zipfile.ZipFile(ROOT + '/evil.pt', 'w') as z:\n"
        "    z.writestr('evil/data.pkl', payload)\n"
        "    z.writestr('evil/version', '3\\n')\n");
  CheckReport report = Scan(P("evil.pt"));
  EXPECT_EQ(report.format, "pt");
  const Finding* critical = nullptr;
  for (const Finding& f : report.findings) {
    if (f.severity == Severity::kCritical) {
      EXPECT_EQ(critical, nullptr) << "a second critical finding: " << f.message;
      critical = &f;
    }
  }
  ASSERT_NE(critical, nullptr);
  EXPECT_EQ(critical->entry, "evil/data.pkl");
  EXPECT_EQ(critical->offset, 0u);
  EXPECT_NE(critical->message.find("os.system"), std::string::npos) << critical->message;
  ASSERT_EQ(report.globals.size(), 1u);
  EXPECT_EQ(report.globals[0].entry, "evil/data.pkl");
  EXPECT_EQ(report.globals[0].name, "os.system");
  EXPECT_EQ(report.globals[0].offset, 0u);
  EXPECT_FALSE(report.globals[0].allowed);
}

}  // namespace
}  // namespace trove::opstest
