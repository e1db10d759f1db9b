// trove::Save (trove/save.h): refusals before anything is written, and a round trip through the
// typed reads (Span in place, ToVector converting). Peers read Save's files in test_install.py.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "trove/error.h"
#include "trove/open.h"
#include "trove/save.h"
#include "trove/tensor.h"

namespace trove {
namespace {

namespace fs = std::filesystem;

fs::path Dir() {
  fs::path d = fs::temp_directory_path() / ("trove_save_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

std::string SaveError(const std::string& path, const std::vector<TensorToSave>& tensors,
                      const std::vector<std::pair<std::string, std::string>>& metadata = {}) {
  try {
    Save(path, tensors, metadata);
  } catch (const Error& e) {
    EXPECT_FALSE(fs::exists(path)) << "nothing is written on an error";
    return e.message();
  }
  return "(no error)";
}

TEST(Save, RefusesBeforeWriting) {
  const std::vector<float> six(6, 1.0f);
  const std::string out = (Dir() / "bad.safetensors").string();
  EXPECT_NE(SaveError(out, {TensorToSave::Of<float>("w", six, {2, 4})}).find("needs 32 bytes, 24 given"), std::string::npos);
  EXPECT_NE(SaveError(out, {TensorToSave::Of<float>("w", six, {2, -3})}).find("negative dimension"), std::string::npos);
  EXPECT_NE(SaveError(out, {TensorToSave::Of<float>("w", six, {1 << 30, 1 << 30, 1 << 30})}).find("more bytes"),
            std::string::npos);
  EXPECT_NE(SaveError(out, {TensorToSave::Of<float>("w", six, {6}), TensorToSave::Of<float>("w", six, {6})})
                .find("given twice"), std::string::npos);
  EXPECT_NE(SaveError(out, {TensorToSave::Of<float>("a", six, {6}), TensorToSave::Of<float>("a/b", six, {6})})
                .find("is a tensor"), std::string::npos);
  const std::string pt = (Dir() / "bad.pt").string();
  EXPECT_NE(SaveError(pt, {TensorToSave::Of<float>("w", six, {6})}, {{"k", "v"}}).find("not pt"), std::string::npos);
}

TEST(Save, TypedReadsOfWhatItWrote) {
  std::vector<float> w(12);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i) * 0.5f;
  const std::vector<int64_t> step = {7};
  const std::string out = (Dir() / "ok.pt").string();
  Save(out, {TensorToSave::Of<float>("model/w", w, {3, 4}), TensorToSave::Of<int64_t>("step", step, {1})});
  const Document doc = Open(out);
  const TensorView& v = *doc.FindTensor("model/w")->view;
  const std::span<const float> span = v.Span<float>();
  EXPECT_EQ(std::vector<float>(span.begin(), span.end()), w);
  EXPECT_EQ(v.ToVector<double>()[11], 5.5);
  EXPECT_EQ(doc.FindTensor("step")->view->ToVector<int64_t>(), step);
  try {
    (void)v.Span<double>();
    FAIL() << "Span<double> of float32";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("its elements are float32"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("ToVector"), std::string::npos) << e.message();
  }
  TensorView transposed = v;
  transposed.shape = {4, 3};
  transposed.strides = {1, 4};
  EXPECT_THROW((void)transposed.Span<float>(), Error);
  EXPECT_EQ(transposed.ToVector<float>()[1], w[4]);
  fs::remove_all(Dir());
}

}  // namespace
}  // namespace trove
