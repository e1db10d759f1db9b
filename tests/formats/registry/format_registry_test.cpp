// The registry of format drivers (formats/format_registry.h): every format found by its name, each
// name once, the hooks a format must have for what ops does with it, detection by the most
// confident driver.
#include "formats/format_registry.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "trove/convert.h"
#include "trove/error.h"
#include "trove/open.h"

namespace trove {
namespace {

TEST(FormatRegistryTest, EveryDriverHasAUniqueNameAndWhatOpsNeeds) {
  std::set<std::string> names;
  for (const FormatDriver* d : FormatDrivers()) {
    ASSERT_NE(d, nullptr);
    EXPECT_TRUE(d->format.known());
    EXPECT_TRUE(names.insert(std::string(d->format.name())).second) << d->format.name() << " registered twice";
    EXPECT_NE(d->detect, nullptr) << d->format.name();
    EXPECT_TRUE(d->read != nullptr || d->refuse != nullptr) << d->format.name() << ": neither read nor refused";
    EXPECT_FALSE(d->summary.empty()) << d->format.name();
    if (d->writes_directory) {
      EXPECT_NE(d->owns_file, nullptr) << d->format.name() << ": a directory writer must say what it owns";
    }
    EXPECT_EQ(FindFormatDriver(d->format), d);
    EXPECT_EQ(FindFormatDriver(d->format.name()), d);
  }
  for (const char* name : {"pt", "pt-legacy", "torchscript", "pt-tar", "tdz", "tensordict", "pskd", "safetensors",
                           "sharded", "npy", "npz"}) {
    EXPECT_TRUE(names.count(name)) << name;
  }
  EXPECT_EQ(FindFormatDriver(Format::kUnknown), nullptr);
  EXPECT_EQ(FindFormatDriver(std::string_view("onnx")), nullptr);
}

TEST(FormatRegistryTest, TargetsComeFromTheDriversExtensions) {
  // A format added by its folder is a target by its own extensions and name: npy and npz plug in so.
  EXPECT_EQ(TargetFormat("/tmp/x.npy", ""), Format("npy"));
  EXPECT_EQ(TargetFormat("/tmp/x.npz", ""), Format("npz"));
  EXPECT_EQ(TargetFormat("/tmp/x.bin", "npz"), Format("npz"));
  for (const FormatDriver* d : FormatDrivers()) {
    for (std::string_view ext : d->extensions) {
      if (d->write == nullptr) continue;
      EXPECT_EQ(TargetFormat("/tmp/model" + std::string(ext), ""), d->format) << ext;
    }
  }
  try {
    TargetFormat("/tmp/x.pt", "pt-tar");  // recognised, never written
    FAIL() << "a format without a writer is no target";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUsage);
    EXPECT_NE(e.message().find("npz"), std::string::npos) << e.message();  // the list comes from the registry
  }
}

}  // namespace
}  // namespace trove
